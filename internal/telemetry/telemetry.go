// Package telemetry is hookstamp's observability (SPEC §7): OpenTelemetry
// traces (the Fiber server span, W3C trace context in and out, the Redis and
// GORM spans under the state machine's), the metrics of SPEC §7 exported in
// Prometheus format, and structured logs that carry the trace id.
//
// Nothing here touches OpenTelemetry's globals: every provider is handed to
// the component that uses it, so that two gateways in one test process keep
// their spans and metrics apart.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/textproto"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/otlptranslator"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/exemplar"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/hookstamp/hookstamp/internal/config"
)

// instrumentation is the OpenTelemetry scope of hookstamp's own spans and
// instruments.
const instrumentation = "github.com/hookstamp/hookstamp"

// Overrides replace parts of what the configuration builds; tests use them.
// Zero fields change nothing.
type Overrides struct {
	// SpanExporter replaces the configured trace exporter. Spans reach it
	// synchronously as they end (tracetest.InMemoryExporter sees a span
	// as soon as End returns).
	SpanExporter sdktrace.SpanExporter
	// MetricReader is an extra reader beside the Prometheus exporter (e.g.
	// sdkmetric.NewManualReader).
	MetricReader sdkmetric.Reader
	// Stdout receives spans with the stdout exporter (os.Stdout).
	Stdout io.Writer
}

// Telemetry holds the trace and metric providers of one gateway.
type Telemetry struct {
	// tp makes every span; it is sdk, or an idProvider when no exporter
	// would read recorded spans (sdk is then nil).
	tp     trace.TracerProvider
	sdk    *sdktrace.TracerProvider
	mp     *sdkmetric.MeterProvider
	prop   propagation.TextMapPropagator
	tracer trace.Tracer
	// httpTracer makes the server spans (Around).
	httpTracer trace.Tracer
	registry   *prometheus.Registry // nil when metrics.prometheus is false
	log        *slog.Logger
	m          *metrics

	shutdownOnce sync.Once
	shutdownErr  error
}

// Setup builds the providers from cfg: the trace exporter (none, stdout or
// otlp over HTTP/protobuf, configured by the standard OTEL_EXPORTER_OTLP_*
// variables), a parent-based sampler with sample_ratio for new traces, the
// W3C trace context and baggage propagator, and a meter provider exported
// through Prometheus on a registry of its own. version is service.version.
func Setup(ctx context.Context, cfg config.Telemetry, version string, log *slog.Logger) (*Telemetry, error) {
	return SetupWith(ctx, cfg, version, log, Overrides{})
}

// SetupWith is Setup with parts replaced (tests).
func SetupWith(ctx context.Context, cfg config.Telemetry, version string, log *slog.Logger, o Overrides) (*Telemetry, error) {
	if log == nil {
		log = slog.Default()
	}
	res, err := newResource(ctx, cfg.ServiceName, version, log)
	if err != nil {
		return nil, err
	}

	sampler := sdktrace.ParentBased(sdktrace.TraceIDRatioBased(cfg.Traces.SampleRatio))
	topts, err := traceOptions(ctx, cfg.Traces, o)
	if err != nil {
		return nil, err
	}
	t := &Telemetry{
		prop: propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}),
		log:  log,
	}
	if topts != nil {
		t.sdk = sdktrace.NewTracerProvider(append(topts, sdktrace.WithResource(res), sdktrace.WithSampler(sampler))...)
		t.tp = t.sdk
	} else {
		t.tp = newIDProvider(sampler)
	}
	t.tracer = t.tp.Tracer(instrumentation, trace.WithInstrumentationVersion(version))
	t.httpTracer = t.tp.Tracer(instrumentation + "/http")

	mopts := []sdkmetric.Option{sdkmetric.WithResource(res)}
	if t.sdk == nil {
		// Exemplars name the trace of a measurement; with no trace
		// exporter that trace is nowhere to be found, and offering every
		// measurement to the exemplar reservoirs cost a cached repeat 4%
		// of the gateway's CPU (make bench, B2).
		mopts = append(mopts, sdkmetric.WithExemplarFilter(exemplar.AlwaysOffFilter))
	}
	if cfg.Metrics.Prometheus {
		var exp sdkmetric.Reader
		t.registry, exp, err = prometheusReader()
		if err != nil {
			if t.sdk != nil {
				_ = t.sdk.Shutdown(ctx)
			}
			return nil, err
		}
		mopts = append(mopts, sdkmetric.WithReader(exp))
	}
	if o.MetricReader != nil {
		mopts = append(mopts, sdkmetric.WithReader(o.MetricReader))
	}
	t.mp = sdkmetric.NewMeterProvider(mopts...)
	t.m, err = newMetrics(t.mp.Meter(instrumentation, metric.WithInstrumentationVersion(version)), log, t.sdk != nil)
	if err != nil {
		_ = t.Shutdown(ctx)
		return nil, err
	}
	return t, nil
}

// traceOptions returns the trace exporter's options, or none for
// exporter none: spans are still made then, so that logs, ledger rows and
// the upstream's traceparent carry trace ids that correlate, but nothing
// would read what a recording span records: they are ids only
// (idtracer.go).
func traceOptions(ctx context.Context, cfg config.Traces, o Overrides) ([]sdktrace.TracerProviderOption, error) {
	switch {
	case o.SpanExporter != nil:
		return []sdktrace.TracerProviderOption{sdktrace.WithSyncer(o.SpanExporter)}, nil
	case cfg.Exporter == config.ExporterStdout:
		w := o.Stdout
		if w == nil {
			w = os.Stdout
		}
		exp, err := stdouttrace.New(stdouttrace.WithWriter(w))
		if err != nil {
			return nil, fmt.Errorf("telemetry: stdout trace exporter: %w", err)
		}
		return []sdktrace.TracerProviderOption{sdktrace.WithBatcher(exp)}, nil
	case cfg.Exporter == config.ExporterOTLP:
		exp, err := otlpExporter(ctx)
		if err != nil {
			return nil, err
		}
		return []sdktrace.TracerProviderOption{sdktrace.WithBatcher(exp)}, nil
	}
	return nil, nil
}

// prometheusReader returns the registry /metrics serves, with the Go and
// process collectors, and the reader that fills it.
func prometheusReader() (*prometheus.Registry, sdkmetric.Reader, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	exp, err := otelprom.New(
		otelprom.WithRegisterer(reg),
		// Series carry route, outcome… and nothing about the OTel
		// scope; target_info still carries service name and version.
		otelprom.WithoutScopeInfo(),
		// Dots to underscores, "_total" on counters, "_seconds" on
		// histograms in "s": the names of SPEC §7.
		otelprom.WithTranslationStrategy(otlptranslator.UnderscoreEscapingWithSuffixes),
	)
	if err != nil {
		return nil, nil, fmt.Errorf("telemetry: prometheus exporter: %w", err)
	}
	return reg, exp, nil
}

// newResource names the service. OTEL_SERVICE_NAME and
// OTEL_RESOURCE_ATTRIBUTES win over the configuration, as in every
// OpenTelemetry SDK.
func newResource(ctx context.Context, name, version string, log *slog.Logger) (*resource.Resource, error) {
	attrs := []attribute.KeyValue{semconv.ServiceName(name)}
	if version != "" {
		attrs = append(attrs, semconv.ServiceVersion(version))
	}
	res, err := resource.New(ctx,
		resource.WithSchemaURL(semconv.SchemaURL),
		resource.WithTelemetrySDK(),
		resource.WithAttributes(attrs...),
		resource.WithFromEnv(),
	)
	if err != nil && res == nil {
		return nil, fmt.Errorf("telemetry: resource: %w", err)
	}
	if err != nil {
		// A partial resource (a malformed OTEL_RESOURCE_ATTRIBUTES) still
		// names the service: keep it rather than refuse to start.
		log.WarnContext(ctx, "telemetry: resource attributes partly ignored", "err", err)
	}
	return res, nil
}

// Tracer makes hookstamp's own spans (the state machine's).
func (t *Telemetry) Tracer() trace.Tracer { return t.tracer }

// TracerProvider is the provider every instrumentation is given.
func (t *Telemetry) TracerProvider() trace.TracerProvider { return t.tp }

// Propagator extracts and injects W3C trace context and baggage.
func (t *Telemetry) Propagator() propagation.TextMapPropagator { return t.prop }

// InjectTrace writes the trace context of ctx into h (forward.Options.InjectTrace):
// the upstream sees the forward span as its parent. The sender's own
// fields go first: a tracestate or baggage the propagators did not take
// up (its traceparent unreadable) belongs to no trace hookstamp sends.
func (t *Telemetry) InjectTrace(ctx context.Context, h http.Header) {
	for _, f := range t.prop.Fields() {
		delete(h, textproto.CanonicalMIMEHeaderKey(f))
	}
	t.prop.Inject(ctx, propagation.HeaderCarrier(h))
}

// MetricsHandler serves the metrics in Prometheus text format (and in
// OpenMetrics, with exemplars carrying trace ids when traces are exported,
// to scrapers that ask for it). With telemetry.metrics.prometheus false it
// is nil: the admin listener then answers 404 with a problem document,
// like its other refusals.
func (t *Telemetry) MetricsHandler() http.Handler {
	if t.registry == nil {
		return nil
	}
	return promhttp.HandlerFor(t.registry, promhttp.HandlerOpts{
		EnableOpenMetrics: true,
		ErrorLog:          slog.NewLogLogger(t.log.Handler(), slog.LevelWarn),
		ErrorHandling:     promhttp.ContinueOnError,
	})
}

// Shutdown flushes the spans not yet exported and stops the providers.
// It is called last, after the server and the stores are closed, so that
// their final spans are flushed too.
// Calls after the first return its result.
func (t *Telemetry) Shutdown(ctx context.Context) error {
	t.shutdownOnce.Do(func() {
		var errs []error
		if t.sdk != nil {
			if err := t.sdk.Shutdown(ctx); err != nil {
				errs = append(errs, fmt.Errorf("shut down tracer provider: %w", err))
			}
		}
		if t.mp != nil {
			if err := t.mp.Shutdown(ctx); err != nil {
				errs = append(errs, fmt.Errorf("shut down meter provider: %w", err))
			}
		}
		t.shutdownErr = errors.Join(errs...)
	})
	return t.shutdownErr
}

// LogErrors sends OpenTelemetry's own errors (an export that failed, spans
// dropped) to log rather than to the standard logger. The OpenTelemetry
// error handler is process-wide: main calls this once; tests do not.
func LogErrors(log *slog.Logger) {
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		log.Warn("opentelemetry", "err", err)
	}))
}

// ShutdownTimeout bounds the final flush when the caller has no deadline.
const ShutdownTimeout = 5 * time.Second

// otlpExporter is the OTLP trace exporter of the protocol the environment
// asks for (config.OTLPProtocol). The exporters read the other
// OTEL_EXPORTER_OTLP_{,TRACES_}* variables (endpoint, headers, timeout,
// compression, certificates, insecure) themselves, and connect lazily.
func otlpExporter(ctx context.Context) (sdktrace.SpanExporter, error) {
	protocol, err := config.OTLPProtocol(os.Getenv)
	if err != nil {
		return nil, fmt.Errorf("telemetry: %w", err)
	}
	var exp sdktrace.SpanExporter
	if protocol == config.OTLPGRPC {
		exp, err = otlptracegrpc.New(ctx)
	} else {
		exp, err = otlptracehttp.New(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("telemetry: otlp trace exporter (%s): %w", protocol, err)
	}
	return exp, nil
}
