package verify

import (
	"bytes"
	"fmt"
	"hash"
	"sync"
	"time"
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

// newGeneric checks o, whose Scheme is SchemeHMAC, and builds the verifier.
func newGeneric(o Options, c clock) (*generic, error) {
	v := &generic{prefix: o.Prefix, sep: o.Separator, url: o.URL, timestamp: o.Timestamp, clock: c}
	var err error
	if v.newHash, err = hashNamed(o.Algorithm); err != nil {
		return nil, err
	}
	if v.sig, v.enc, err = signatureOptions(o); err != nil {
		return nil, err
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
	// The content differs per key only when the template writes {secret}.
	perKey := v.tmpl.Uses(PartSecret)
	var content []byte
	for i, k := range v.keys {
		if i == 0 || perKey {
			var err error
			content, err = v.tmpl.Render((*bp)[:0], r, Inputs{URL: v.url, Secret: v.secrets[i]})
			*bp = content[:0]
			if err != nil {
				return -1, err
			}
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

// splitN splits b on sep into at most n parts, dropping what follows the
// nth: a header padded with junk candidates costs no more than n MACs.
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
