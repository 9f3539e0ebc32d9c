package telemetry

import (
	"context"
	"errors"
	"strings"

	"github.com/gofiber/fiber/v2"
	"github.com/redis/go-redis/extra/redisotel/v9"
	"github.com/redis/go-redis/v9"
	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"gorm.io/gorm"

	"github.com/hookstamp/hookstamp/internal/ingress"
)

// Around runs serve inside the request's server span, continuing the W3C
// trace context the sender sent (ingress.Observer). The span is named
// after the route (ingress.SpanName); the query string is left out of its
// URL attributes, as it may carry keys or tokens. No trace headers are
// written on responses: senders get no request bytes echoed, and no trace
// ids of ours.
//
// It is hookstamp's own rather than otelfiber's, which copies every request
// header and builds metric attribute sets on every request even with its
// metrics off. Attributes are computed only for a span that records.
func (t *Telemetry) Around(c *fiber.Ctx, serve func(*fiber.Ctx) error) error {
	parent := c.UserContext()
	ctx := t.prop.Extract(parent, headerCarrier{&c.Request().Header})
	ctx, span := t.httpTracer.Start(ctx, ingress.Method(c), serverKind)
	c.SetUserContext(ctx)
	if err := serve(c); err != nil {
		span.RecordError(err)
		_ = c.App().Config().ErrorHandler(c, err)
	}
	if span.IsRecording() {
		status := c.Response().StatusCode()
		// Bytes that are not UTF-8 replaced: OTLP refuses such a string,
		// and drops the whole batch it is in.
		path := strings.ToValidUTF8(string(c.Request().URI().PathOriginal()), "\uFFFD")
		span.SetName(ingress.SpanName(c))
		span.SetAttributes(
			semconv.HTTPRequestMethodKey.String(ingress.Method(c)),
			semconv.URLPath(path),
			semconv.URLScheme(connScheme(c)),
			semconv.HTTPResponseStatusCode(status),
			semconv.ClientAddress(c.IP()),
			// The names older backends and dashboards query.
			attribute.String("http.target", path),
			attribute.String("http.url", path),
		)
		if status >= 500 {
			span.SetStatus(codes.Error, "")
		}
	}
	span.End()
	c.SetUserContext(parent)
	return nil
}

var serverKind = trace.WithSpanKind(trace.SpanKindServer)

// connScheme is the scheme of the connection the request came on; unlike
// Fiber's Protocol it does not take a sender's X-Forwarded-Proto for it.
func connScheme(c *fiber.Ctx) string {
	if c.Context().IsTLS() {
		return "https"
	}
	return "http"
}

// headerCarrier reads trace context from fasthttp's request headers without
// copying them. Set and Keys are never used by extraction.
//
// A header sent on several lines is one list (RFC 9110 §5.3), as W3C Trace
// Context and Baggage allow for tracestate and baggage: every line is read.
// The propagator's output replaces these headers upstream, so a member of a
// later line read as absent would be lost to the upstream.
type headerCarrier struct{ h *fasthttp.RequestHeader }

func (c headerCarrier) Get(key string) string {
	lines := c.h.PeekAll(key)
	switch len(lines) {
	case 0:
		return ""
	case 1:
		return string(lines[0])
	}
	return strings.Join(c.Values(key), ",")
}

// Values returns every line of key (propagation.ValuesGetter).
func (c headerCarrier) Values(key string) []string {
	lines := c.h.PeekAll(key)
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i] = string(l)
	}
	return out
}

func (c headerCarrier) Set(string, string) {}

func (c headerCarrier) Keys() []string { return nil }

// InstrumentRedis makes a client span for every command of c (the Redis
// screen's client), under the state machine's spans. Commands are recorded
// without their arguments: they hold keys and response bodies.
//
// With no exporter (traces.exporter none) nothing would read those spans:
// the client is left uninstrumented.
func (t *Telemetry) InstrumentRedis(c redis.UniversalClient) error {
	if t.sdk == nil {
		return nil
	}
	return redisotel.InstrumentTracing(c,
		redisotel.WithTracerProvider(t.tp),
		redisotel.WithDBStatement(false),
		redisotel.WithCallerEnabled(false),
	)
}

// GormPlugins are the GORM plugins for the ledger (sqlledger.Options.Plugins):
// a client span for every statement run on behalf of a delivery, named
// "OPERATION table" and carrying the SQL text without its arguments (they
// hold keys and bodies). Statements of background work (migration, the
// sweeper) start no trace of their own.
//
// It is a small plugin of hookstamp's rather than gorm.io/plugin/opentelemetry,
// which links the MySQL and ClickHouse drivers into the binary (+7 MB).
//
// With no exporter (traces.exporter none) there are none.
func (t *Telemetry) GormPlugins() []gorm.Plugin {
	if t.sdk == nil {
		return nil
	}
	return []gorm.Plugin{&gormTracing{tracer: t.tp.Tracer(instrumentation + "/gorm")}}
}

type gormTracing struct {
	tracer trace.Tracer
}

func (*gormTracing) Name() string { return "hookstamp:otel" }

// gormCtx carries the statement's span, and the context to restore after.
type gormCtx struct {
	context.Context
	parent context.Context
}

func (p *gormTracing) Initialize(db *gorm.DB) error {
	type register interface {
		Register(name string, fn func(*gorm.DB)) error
	}
	cb := db.Callback()
	hooks := []struct {
		before, after register
		op            string
	}{
		{cb.Create().Before("gorm:create"), cb.Create().After("gorm:create"), "INSERT"},
		{cb.Query().Before("gorm:query"), cb.Query().After("gorm:query"), "SELECT"},
		{cb.Update().Before("gorm:update"), cb.Update().After("gorm:update"), "UPDATE"},
		{cb.Delete().Before("gorm:delete"), cb.Delete().After("gorm:delete"), "DELETE"},
		{cb.Row().Before("gorm:row"), cb.Row().After("gorm:row"), ""},
		{cb.Raw().Before("gorm:raw"), cb.Raw().After("gorm:raw"), ""},
	}
	var errs []error
	for i, h := range hooks {
		name := "hookstamp:otel_" + []string{"create", "query", "update", "delete", "row", "raw"}[i]
		errs = append(errs, h.before.Register(name+"_before", p.before(h.op)), h.after.Register(name+"_after", p.after(h.op)))
	}
	return errors.Join(errs...)
}

func (p *gormTracing) before(op string) func(*gorm.DB) {
	return func(tx *gorm.DB) {
		parent := tx.Statement.Context
		if parent == nil || !trace.SpanContextFromContext(parent).IsValid() {
			return
		}
		name := op
		if name == "" {
			name = "SQL"
		}
		ctx, _ := p.tracer.Start(parent, name, trace.WithSpanKind(trace.SpanKindClient),
			trace.WithAttributes(semconv.DBSystemNameKey.String(dbSystem(tx))))
		tx.Statement.Context = gormCtx{Context: ctx, parent: parent}
	}
}

func (p *gormTracing) after(op string) func(*gorm.DB) {
	return func(tx *gorm.DB) {
		gc, ok := tx.Statement.Context.(gormCtx)
		if !ok {
			return
		}
		tx.Statement.Context = gc.parent
		span := trace.SpanFromContext(gc.Context)
		defer span.End()
		if !span.IsRecording() {
			return
		}
		query := tx.Statement.SQL.String()
		// op is shared by every call of this closure: derive a local copy.
		verb := op
		if verb == "" {
			verb, _, _ = strings.Cut(strings.TrimSpace(query), " ")
			verb = strings.ToUpper(verb)
		}
		attrs := []attribute.KeyValue{semconv.DBQueryText(query), semconv.DBOperationName(verb)}
		name := verb
		if table := tx.Statement.Table; table != "" {
			attrs = append(attrs, semconv.DBCollectionName(table))
			name = verb + " " + table
		}
		if tx.Statement.RowsAffected >= 0 {
			attrs = append(attrs, attribute.Int64("db.rows_affected", tx.Statement.RowsAffected))
		}
		span.SetName(name)
		span.SetAttributes(attrs...)
		if err := tx.Error; err != nil && !errors.Is(err, gorm.ErrRecordNotFound) {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
	}
}

func dbSystem(tx *gorm.DB) string {
	switch n := tx.Dialector.Name(); n {
	case "postgres":
		return "postgresql"
	default:
		return n
	}
}
