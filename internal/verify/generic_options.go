package verify

import (
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// The options of scheme hmac, checked once when the verifier is built.
// Errors start with the option's configuration key.

// hashNamed is verify.algorithm's hash; "" is sha256.
func hashNamed(name string) (func() hash.Hash, error) {
	switch strings.ToLower(name) {
	case "", "sha256":
		return sha256.New, nil
	case "sha1":
		return sha1.New, nil
	case "sha512":
		return sha512.New, nil
	}
	return nil, fmt.Errorf("algorithm: %q is not one of sha1, sha256, sha512", name)
}

// encodingNamed is verify.encoding's decoding; "" is hex.
func encodingNamed(name string) (encoding, error) {
	switch strings.ToLower(name) {
	case "", "hex":
		return encHex, nil
	case "base64":
		return encBase64, nil
	}
	return 0, fmt.Errorf("encoding: %q is not one of hex, base64", name)
}

// templateFor parses o.Template ({body} when unset) and checks that URL is
// given exactly when the template writes it.
func templateFor(o Options) (*Template, error) {
	src := o.Template
	if src == "" {
		src = "{" + PartBody + "}"
	}
	t, err := ParseTemplate(src)
	if err != nil {
		return nil, fmt.Errorf("template: %w", err)
	}
	switch {
	case t.Uses(PartURL) && o.URL == "":
		return nil, fmt.Errorf("url: required, the template signs {url}")
	case !t.Uses(PartURL) && o.URL != "":
		return nil, fmt.Errorf("url: the template has no {url}, so the URL would not be checked")
	case o.URL != "":
		if err := checkURL(o.URL); err != nil {
			return nil, fmt.Errorf("url: %w", err)
		}
	}
	return t, nil
}

// checkTimestamp checks verify.timestamp: one source, a known unit, and no
// unit without a source.
func checkTimestamp(ts TimestampSource) error {
	switch {
	case ts.Header != "" && ts.JSON != "":
		return fmt.Errorf("timestamp: header and json exclude each other")
	case ts.Header != "" && !httpguts.ValidHeaderFieldName(ts.Header):
		return fmt.Errorf("timestamp.header: %q is not a valid header name", ts.Header)
	case ts.JSON != "" && !PlainPath(ts.JSON):
		return fmt.Errorf("timestamp.json: %q is not a plain path", ts.JSON)
	case ts.Unit != "" && ts.Unit != "s" && ts.Unit != "ms":
		return fmt.Errorf("timestamp.unit: %q is not one of s, ms", ts.Unit)
	case ts.Unit != "" && !ts.set():
		return fmt.Errorf("timestamp.unit: set without timestamp.header or timestamp.json")
	}
	return nil
}

// checkPaths returns a copy of paths, all plain, or the first that is not.
func checkPaths(key string, paths []string) ([]string, error) {
	for i, p := range paths {
		if !PlainPath(p) {
			return nil, fmt.Errorf("%s[%d]: %q is not a plain path", key, i, p)
		}
	}
	return append([]string(nil), paths...), nil
}

// decodeSecrets turns each secret into its key bytes: as given, or decoded
// from hex (Adyen's HMAC keys) or base64.
func decodeSecrets(secrets []string, enc string) ([][]byte, error) {
	if len(secrets) == 0 {
		return nil, fmt.Errorf("secrets: at least one required")
	}
	out := make([][]byte, len(secrets))
	for i, s := range secrets {
		var err error
		switch enc {
		case "", "raw":
			out[i] = []byte(s)
		case "hex":
			out[i], err = hex.DecodeString(s)
		case "base64":
			out[i], err = base64.StdEncoding.DecodeString(s)
		default:
			return nil, fmt.Errorf("secret_encoding: %q is not one of raw, hex, base64", enc)
		}
		if err != nil {
			// Not wrapped: the decoder's message quotes the secret's bytes.
			return nil, &SecretError{Index: i, Err: errors.New("not " + enc)}
		}
		if len(out[i]) == 0 {
			return nil, &SecretError{Index: i, Err: errEmptySecret}
		}
	}
	return out, nil
}
