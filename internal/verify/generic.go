package verify

import (
	"bytes"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"hash"
	"strings"
	"sync"
	"time"

	"github.com/tidwall/gjson"
)

// maxCandidates bounds the signatures tried from one header: rotation needs
// two or three.
const maxCandidates = 16

// TimestampSource says where a scheme hmac request carries its signed
// timestamp. The zero value means the provider signs none.
type TimestampSource struct {
	// Header names the header holding the timestamp.
	Header string
	// JSON is the plain GJSON path of the timestamp in the body, when it
	// travels there instead (Mailgun). Header and JSON exclude each other.
	JSON string
	// Unit is "s" (Unix seconds, the default) or "ms" (Unix milliseconds:
	// HubSpot, DingTalk).
	Unit string
}

func (s TimestampSource) set() bool { return s.Header != "" || s.JSON != "" }

// sigSource is where the signature is read: a header or a member of the
// JSON body.
type sigSource struct {
	header string
	json   string
}

func newSigSource(header, json string) (sigSource, error) {
	switch {
	case header != "" && json != "":
		return sigSource{}, fmt.Errorf("json: the signature is read from header %s or from the body, not both", header)
	case json != "":
		if !PlainPath(json) {
			return sigSource{}, fmt.Errorf("json: %q is not a plain path (names and indexes separated by dots)", json)
		}
		return sigSource{json: json}, nil
	case header == "":
		header = "X-Signature"
	}
	if !isToken(header) {
		return sigSource{}, fmt.Errorf("header: %q is not a valid header name", header)
	}
	return sigSource{header: header}, nil
}

func (s sigSource) String() string {
	if s.json != "" {
		return "body member " + s.json
	}
	return s.header + " header"
}

// read returns the value carrying the signature: the one header value, or
// the string at the JSON path of a body that names no member on the path
// twice.
func (s sigSource) read(r Request) ([]byte, error) {
	if s.header != "" {
		return single(r, s.header)
	}
	return jsonString(r.Body(), s.json)
}

// jsonAt returns the value at path in body, refusing a body that is not
// JSON or names a member on the path twice.
func jsonAt(body []byte, path string) (gjson.Result, error) {
	if !gjson.ValidBytes(body) {
		return gjson.Result{}, reject("body is not valid JSON")
	}
	if DuplicateOnPath(body, path) {
		return gjson.Result{}, reject("body names a member on %s more than once", path)
	}
	return gjson.GetBytes(body, path), nil
}

// jsonString returns the non-empty string at path in body.
func jsonString(body []byte, path string) ([]byte, error) {
	res, err := jsonAt(body, path)
	switch {
	case err != nil:
		return nil, err
	case !res.Exists():
		return nil, reject("missing %s in the body", path)
	case res.Type != gjson.String:
		return nil, reject("%s in the body is not a string", path)
	case res.Str == "":
		return nil, reject("empty %s in the body", path)
	case len(res.Str) > MaxHeaderLen:
		return nil, reject("%s in the body too long", path)
	}
	return []byte(res.Str), nil
}

// generic is scheme hmac: a MAC over a signed-content template, read from a
// header (several candidates allowed) or from the body, with an optional
// signed timestamp.
type generic struct {
	newHash   func() hash.Hash
	secrets   [][]byte
	keys      keyring
	tmpl      *Template
	url       string
	sig       sigSource
	prefix    string
	sep       string
	enc       encoding
	timestamp TimestampSource
	clock     clock
	single    []string
	bufs      sync.Pool // of *[]byte, the rendered content
}

func newGeneric(o Options, c clock) (*generic, error) {
	v := &generic{prefix: o.Prefix, sep: o.Separator, url: o.URL, timestamp: o.Timestamp, clock: c}
	var err error
	if v.newHash, err = hashNamed(o.Algorithm); err != nil {
		return nil, err
	}
	if v.sig, err = newSigSource(o.Header, o.JSON); err != nil {
		return nil, err
	}
	if v.enc, err = encodingNamed(o.Encoding); err != nil {
		return nil, err
	}
	if len(v.prefix) > 64 {
		return nil, fmt.Errorf("prefix: longer than 64 bytes")
	}
	if len(v.sep) > 8 || (v.sep != "" && v.sig.json != "") {
		return nil, fmt.Errorf("separator: at most 8 bytes, and only for a signature in a header")
	}
	if v.tmpl, err = templateFor(o); err != nil {
		return nil, err
	}
	if err := checkTimestamp(o.Timestamp); err != nil {
		return nil, err
	}
	if v.single, err = checkPaths("single", o.Single); err != nil {
		return nil, err
	}
	if v.secrets, err = decodeSecrets(o.Secrets, o.SecretEncoding); err != nil {
		return nil, err
	}
	for _, s := range v.secrets {
		v.keys = append(v.keys, newMACKey(v.newHash, s))
	}
	v.bufs.New = func() any { b := make([]byte, 0, 1024); return &b }
	return v, nil
}

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

func checkTimestamp(ts TimestampSource) error {
	switch {
	case ts.Header != "" && ts.JSON != "":
		return fmt.Errorf("timestamp: header and json exclude each other")
	case ts.Header != "" && !isToken(ts.Header):
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
			return nil, fmt.Errorf("secrets[%d]: not %s", i, enc)
		}
		if len(out[i]) == 0 {
			return nil, fmt.Errorf("secrets[%d]: empty", i)
		}
	}
	return out, nil
}

func (v *generic) Verify(r Request) error {
	_, err := v.verify(r)
	return err
}

// verify returns the index of the secret that verified r.
func (v *generic) verify(r Request) (int, error) {
	raw, err := v.sig.read(r)
	if err != nil {
		return -1, err
	}
	sigs, err := v.candidates(raw)
	if err != nil {
		return -1, err
	}
	if err := v.timestamp.check(r, v.clock); err != nil {
		return -1, err
	}
	if err := v.sole(r.Body()); err != nil {
		return -1, err
	}
	bp := v.bufs.Get().(*[]byte)
	defer v.bufs.Put(bp)
	for i, k := range v.keys {
		content, err := v.tmpl.Render((*bp)[:0], r, Inputs{URL: v.url, Secret: v.secrets[i]})
		*bp = content[:0]
		if err != nil {
			return -1, err
		}
		if k.match(sigs, content) {
			return i, nil
		}
	}
	return -1, reject("no signature matched")
}

// candidates splits raw on the separator and decodes each entry that
// carries the prefix; entries without it belong to other versions and are
// skipped.
func (v *generic) candidates(raw []byte) ([][]byte, error) {
	items := [][]byte{raw}
	if v.sep != "" {
		items = splitN(raw, v.sep, maxCandidates)
	}
	var sigs [][]byte
	for _, it := range items {
		dst := make([]byte, maxMACSize)
		if n, ok := decodeSig(dst, trimOWS(it), v.prefix, v.enc); ok {
			sigs = append(sigs, dst[:n])
		}
	}
	if len(sigs) == 0 {
		return nil, reject("malformed %s", v.sig)
	}
	return sigs, nil
}

func splitN(b []byte, sep string, n int) [][]byte {
	var out [][]byte
	for len(out) < n {
		i := bytes.Index(b, []byte(sep))
		if i < 0 {
			return append(out, b)
		}
		out = append(out, b[:i])
		b = b[i+len(sep):]
	}
	return out
}

// check checks the signed timestamp against c, when the provider sends one.
func (ts TimestampSource) check(r Request, c clock) error {
	if !ts.set() {
		return nil
	}
	var raw []byte
	var err error
	name := ts.Header
	if ts.Header != "" {
		raw, err = single(r, ts.Header)
	} else {
		name = ts.JSON
		raw, err = jsonScalar(r.Body(), ts.JSON)
	}
	if err != nil {
		return err
	}
	n, ok := parseUnix(raw)
	if !ok {
		return reject("malformed timestamp %s", name)
	}
	t := time.Unix(n, 0)
	if ts.Unit == "ms" {
		t = time.UnixMilli(n)
	}
	return c.check(t)
}

// jsonScalar returns the text of the string or number at path.
func jsonScalar(body []byte, path string) ([]byte, error) {
	res, err := jsonAt(body, path)
	if err != nil {
		return nil, err
	}
	switch res.Type {
	case gjson.String:
		return []byte(res.Str), nil
	case gjson.Number:
		return []byte(res.Raw), nil
	}
	return nil, reject("missing %s in the body", path)
}

// sole refuses a body whose listed arrays hold other than one element:
// the signature covers one element, and a second would ride along
// unverified.
func (v *generic) sole(body []byte) error {
	if len(v.single) == 0 {
		return nil
	}
	for _, p := range v.single {
		res, err := jsonAt(body, p)
		if err != nil {
			return err
		}
		if !res.IsArray() || len(res.Array()) != 1 {
			return reject("%s must hold exactly one element: only one is signed", p)
		}
	}
	return nil
}
