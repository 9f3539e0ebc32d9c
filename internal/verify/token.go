package verify

import (
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
)

// token is scheme token: the provider sends a shared secret as is, in a
// header (GitLab's X-Gitlab-Token, Telegram's
// X-Telegram-Bot-Api-Secret-Token) or in the JSON body (Lark's
// header.token). It proves the sender knows the secret; unlike a MAC it
// does not bind the body, so a captured request can be altered.
type token struct {
	src     sigSource
	digests [][sha256.Size]byte
}

func newToken(o Options) (*token, error) {
	if o.Header == "" && o.JSON == "" {
		return nil, fmt.Errorf("header: required with scheme %s (or json, for a token in the body)", SchemeToken)
	}
	src, err := newSigSource(o.Header, o.JSON)
	if err != nil {
		return nil, err
	}
	v := &token{src: src}
	for i, s := range o.Secrets {
		if s == "" {
			return nil, &SecretError{Index: i, Err: errEmptySecret}
		}
		v.digests = append(v.digests, sha256.Sum256([]byte(s)))
	}
	return v, nil
}

func (v *token) Verify(r Request) error {
	got, err := v.src.read(r)
	if err != nil {
		return err
	}
	return v.check(got)
}

// check compares digests, so that the time taken says nothing about the
// token's length or how much of it matched.
func (v *token) check(got []byte) error {
	d := sha256.Sum256(got)
	ok := 0
	for i := range v.digests {
		ok |= subtle.ConstantTimeCompare(d[:], v.digests[i][:])
	}
	if ok != 1 {
		return reject("%s does not match", v.src)
	}
	return nil
}
