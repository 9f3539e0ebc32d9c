package config

import (
	"reflect"
	"strings"
	"time"
)

// Default returns the configuration used for every key a file leaves unset
// (SPEC §3). It has no routes: see DefaultRoute for the per-route defaults.
func Default() Config {
	return Config{
		Server: Server{
			Listen:          ":8080",
			BodyLimit:       1 * MiB,
			ReadTimeout:     10 * time.Second,
			WriteTimeout:    60 * time.Second,
			ShutdownTimeout: 15 * time.Second,
			MaxConns:        4096,
			TLS:             TLS{MinVersion: "1.2"},
		},
		Admin: Admin{Listen: "127.0.0.1:9090", Console: true},
		Store: Store{
			Driver:        StoreSQLite,
			DSN:           "data/hookstamp.db",
			MaxOpenConns:  16,
			AutoMigrate:   true,
			SweepInterval: time.Minute,
			OnUnavailable: StoreUnavailableReject,
		},
		Screen: Screen{
			Driver:        ScreenMemory,
			Redis:         Redis{Addrs: []string{"127.0.0.1:6379"}},
			Prefix:        "hookstamp:",
			Lease:         30 * time.Second,
			TTL:           24 * time.Hour,
			MaxCachedBody: 64 * KiB,
			LocalCache:    32 * MiB,
			OnUnavailable: ScreenUnavailableStore,
		},
		Telemetry: Telemetry{
			ServiceName: "hookstamp",
			Traces:      Traces{Exporter: ExporterNone, SampleRatio: 1.0},
			Metrics:     Metrics{Prometheus: true},
			Log:         Log{Level: "info", Format: "json"},
		},
	}
}

// DefaultRoute returns the values a route gets for every key it (and its
// preset) leaves unset. Name, Path and Upstream.URL have no default.
func DefaultRoute() Route {
	return Route{
		Methods:  []string{"POST"},
		Mode:     ModeEnforce,
		Upstream: Upstream{Timeout: 10 * time.Second, KeyHeader: "Idempotency-Key"},
		Key:      Key{Required: true, MaxLength: 255},
		Fingerprint: Fingerprint{
			Mode:       FingerprintBody,
			OnMismatch: OnMismatchReject,
		},
		Verify:      Verify{Tolerance: 5 * time.Minute, Algorithm: "sha256", Encoding: "hex"},
		Inflight:    InflightWait,
		WaitTimeout: 10 * time.Second,
		Record: Record{
			Statuses:  []string{"2xx", "4xx"},
			Headers:   []string{"Content-Type"},
			MaxBody:   1 * MiB,
			Ambiguous: AmbiguousRelease,
		},
		Delivery: DeliverySync,
		Async: Async{
			Ack:          Ack{Status: 202},
			MaxAttempts:  25,
			MaxAge:       72 * time.Hour,
			Backoff:      Backoff{Initial: time.Second, Max: time.Hour},
			Concurrency:  8,
			PollInterval: 250 * time.Millisecond,
		},
		Retention: 720 * time.Hour,
		Source:    "ip",
	}
}

// toRaw turns a configuration value into the raw tree the loader merges:
// structs become maps keyed by their koanf tags, key sources become one-entry
// maps as a user writes them, nil slices are left out.
func toRaw(v reflect.Value) any {
	switch v.Kind() {
	case reflect.Struct:
		if v.Type() == keySourceType {
			s := v.Interface().(KeySource)
			return map[string]any{s.Kind: s.Arg}
		}
		m := make(map[string]any, v.NumField())
		for i := 0; i < v.NumField(); i++ {
			name := koanfName(v.Type().Field(i))
			if name == "" {
				continue
			}
			if x := toRaw(v.Field(i)); x != nil {
				m[name] = x
			}
		}
		return m
	case reflect.Slice:
		if v.IsNil() {
			return nil
		}
		out := make([]any, v.Len())
		for i := range out {
			out[i] = toRaw(v.Index(i))
		}
		return out
	default:
		return v.Interface()
	}
}

// koanfName is the configuration key of a struct field, "" for none.
func koanfName(f reflect.StructField) string {
	if !f.IsExported() {
		return ""
	}
	name, _, _ := strings.Cut(f.Tag.Get("koanf"), ",")
	return name
}

var (
	keySourceType = reflect.TypeOf(KeySource{})
	durationType  = reflect.TypeOf(time.Duration(0))
	sizeType      = reflect.TypeOf(Size(0))
)
