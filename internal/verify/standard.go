package verify

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"strings"
)

// standardHeaders are the three headers of one Standard Webhooks message.
type standardHeaders struct {
	id, timestamp, signature string
}

// standardFamilies are the header names Standard Webhooks senders use: the
// specification's, and Svix's own, which Svix-based senders (Clerk, Resend)
// send instead.
var standardFamilies = [...]standardHeaders{
	{id: "webhook-id", timestamp: "webhook-timestamp", signature: "webhook-signature"},
	{id: "svix-id", timestamp: "svix-timestamp", signature: "svix-signature"},
}

// present reports whether any header of the family is in r.
func (f standardHeaders) present(r Request) bool {
	return len(r.HeaderValues(f.id)) > 0 || len(r.HeaderValues(f.timestamp)) > 0 || len(r.HeaderValues(f.signature)) > 0
}

// standardWebhooks verifies "{id}.{timestamp}.{body}": v1 entries are
// base64 HMAC-SHA256 under the secrets, v1a entries base64 Ed25519 under
// the public keys, all in one space-separated signature header.
//
// Every header family present must verify, not just one: a route keys on
// one family's id (webhook-id, or svix-id for Clerk and Resend), and that
// id must be the one the signature covers, whatever the other family says.
type standardWebhooks struct {
	macBase
	public publicKeys
}

func newStandardWebhooks(o Options, c clock) (Verifier, error) {
	if len(o.Secrets) == 0 && strings.TrimSpace(o.PublicKey) == "" {
		return nil, fmt.Errorf("secrets: scheme %s needs secrets (whsec_…), public_key (whpk_…) or both", o.Scheme)
	}
	keys, err := newKeyring(o)
	if err != nil {
		return nil, err
	}
	v := &standardWebhooks{macBase: macBase{keys: keys, clock: c}}
	if strings.TrimSpace(o.PublicKey) != "" {
		if v.public, err = parseEd25519Keys(o.PublicKey); err != nil {
			return nil, fmt.Errorf("public_key: %w", err)
		}
	}
	return v, nil
}

func (v *standardWebhooks) Verify(r Request) error {
	checked := false
	for _, f := range standardFamilies {
		if !f.present(r) {
			continue
		}
		if err := v.verify(r, f); err != nil {
			return err
		}
		checked = true
	}
	if !checked {
		// Names the specification's headers as missing.
		return v.verify(r, standardFamilies[0])
	}
	return nil
}

func (v *standardWebhooks) verify(r Request, f standardHeaders) error {
	id, err := single(r, f.id)
	if err != nil {
		return err
	}
	ts, err := single(r, f.timestamp)
	if err != nil {
		return err
	}
	h, err := single(r, f.signature)
	if err != nil {
		return err
	}
	if err := v.clock.checkUnix(f.timestamp, ts); err != nil {
		return err
	}
	sigs, err := ParseStandardSignatureHeader(h)
	if err != nil {
		return reject("malformed %s header: %v", f.signature, err)
	}
	if len(sigs.V1) > 0 && v.keys.match(sigs.V1, id, dot, ts, dot, r.Body()) {
		return nil
	}
	if len(sigs.V1a) > 0 && len(v.public) > 0 {
		msg := bytes.Join([][]byte{id, dot, ts, dot, r.Body()}, nil)
		if v.public.verify(msg, sigs.V1a) {
			return nil
		}
	}
	return reject("no signature matched")
}

// standardKey turns a Standard Webhooks secret into the HMAC key: the
// "whsec_" prefix is dropped and the rest is base64.
func standardKey(s string) ([]byte, error) {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(s, "whsec_"))
	if err != nil {
		// Do not wrap err: base64 errors quote the offending byte offset only,
		// but the secret's shape is nobody's business.
		return nil, fmt.Errorf("standard-webhooks secret is not base64 after the whsec_ prefix")
	}
	if len(key) == 0 {
		return nil, fmt.Errorf("standard-webhooks secret decodes to an empty key")
	}
	return key, nil
}
