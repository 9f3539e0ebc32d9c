package config

import (
	"errors"
	"fmt"
	"strings"

	"github.com/hookstamp/hookstamp/internal/extract"
	"github.com/hookstamp/hookstamp/internal/verify"
)

// RouteParts are the compiled parts of a route that serving it needs.
type RouteParts struct {
	Extractor *extract.Extractor
	// Fingerprinter is nil with fingerprint.mode none.
	Fingerprinter *extract.Fingerprinter
	// Verifier is nil when verify.scheme is empty.
	Verifier verify.Verifier
	// Final reports whether an upstream status is final (record.statuses).
	Final func(status int) bool
}

// Build compiles r's key extractor, fingerprinter, verifier and final
// statuses. Validate builds them with the same functions, so a validated
// route builds; an error starts with the section it is about ("key: …").
func (r *Route) Build() (RouteParts, error) {
	var p RouteParts
	var err error
	if p.Extractor, err = r.Key.extractor(r.Name); err != nil {
		return p, fmt.Errorf("key: %w", err)
	}
	if p.Fingerprinter, err = r.Fingerprint.fingerprinter(); err != nil {
		return p, fmt.Errorf("fingerprint: %w", err)
	}
	if r.Fingerprint.Mode == FingerprintNone {
		p.Fingerprinter = nil
	}
	if p.Verifier, err = r.Verify.verifier(); err != nil {
		return p, fmt.Errorf("verify: %w", err)
	}
	if p.Final, err = ParseStatuses(r.Record.Statuses); err != nil {
		return p, fmt.Errorf("record.statuses: %w", err)
	}
	return p, nil
}

// extractor compiles the key sources; its errors start with the source
// ("sources[1]: …").
func (k Key) extractor(route string) (*extract.Extractor, error) {
	src := make([]extract.Source, len(k.Sources))
	for i, s := range k.Sources {
		src[i] = extract.Source{Kind: s.Kind, Arg: s.Arg}
	}
	return extract.NewExtractor(route, src, k.MaxLength)
}

// fingerprinter compiles the fingerprint settings; its errors start with
// the field ("fields[1]: …").
func (f Fingerprint) fingerprinter() (*extract.Fingerprinter, error) {
	return extract.NewFingerprinter(f.Mode, f.Fields)
}

// verifier builds the signature verifier (nil when no scheme is set); its
// errors start with the key they are about.
func (v Verify) verifier() (verify.Verifier, error) {
	if v.Scheme == "" {
		return nil, nil
	}
	var secrets []string
	var at []int // at[i] is the index in v.Secrets of secrets[i]
	for i, s := range v.Secrets {
		if strings.TrimSpace(s) != "" {
			secrets = append(secrets, s)
			at = append(at, i)
		}
	}
	ver, err := verify.New(verify.Options{Scheme: v.Scheme, Secrets: secrets, PublicKey: v.PublicKey, URL: v.URL,
		Tolerance: v.Tolerance, Header: v.Header, Algorithm: v.Algorithm, Encoding: v.Encoding, Prefix: v.Prefix,
		JSON: v.JSON, Template: v.Template, Separator: v.Separator, SecretEncoding: v.SecretEncoding,
		Single: v.Single, Challenge: v.Challenge, ChallengeToken: v.ChallengeToken,
		Timestamp: verify.TimestampSource{Header: v.Timestamp.Header, JSON: v.Timestamp.JSON, Unit: v.Timestamp.Unit}})
	// The error names the secret as the configuration lists it, the empty
	// ones (a rotation's unset slot) counted.
	var se *verify.SecretError
	if errors.As(err, &se) {
		se.Index = at[se.Index]
	}
	return ver, err
}
