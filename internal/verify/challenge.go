package verify

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/tidwall/gjson"

	"github.com/hookstamp/hookstamp/internal/extract"
)

// Challenge kinds, as written in verify.challenge: handshakes that
// hookstamp answers itself instead of forwarding them.
const (
	// ChallengeZoom answers Zoom's endpoint.url_validation event, signed
	// like every event, with the plainToken and its HMAC-SHA256 under the
	// secret token (hex).
	ChallengeZoom = "zoom"
	// ChallengeLark answers Lark's url_verification request, which carries
	// the verification token at "token" rather than "header.token", by
	// echoing its challenge.
	ChallengeLark = "lark"
	// ChallengeMeta answers Meta's GET subscription check, unsigned, whose
	// hub.verify_token must be Options.ChallengeToken, by echoing
	// hub.challenge.
	ChallengeMeta = "meta"
)

// QueryRequest is a Request that also shows its method and URL query, in
// which Meta's subscription check travels.
type QueryRequest interface {
	Request
	// Method returns the HTTP method.
	Method() []byte
	// Query returns the first value of the URL query parameter, nil if
	// absent.
	Query(name string) []byte
}

// maxChallenge bounds the handshake value echoed back: Zoom's and Lark's
// are a few dozen bytes.
const maxChallenge = 256

// Answer is what hookstamp sends back to a handshake: always status 200.
type Answer struct {
	ContentType string
	Body        []byte
}

// Challenger is implemented by verifiers whose provider sends a handshake
// that hookstamp answers itself.
type Challenger interface {
	// Challenge returns the answer when r is the provider's handshake and
	// verifies, a rejection when it is the handshake and does not, and nil,
	// nil when r is not the handshake (verify it with Verify).
	Challenge(r Request) (*Answer, error)
}

func checkChallenge(kind, scheme string, o Options) error {
	switch {
	case (kind == ChallengeMeta) != (o.ChallengeToken != ""):
		return fmt.Errorf("challenge_token: required with challenge %s, and only there", ChallengeMeta)
	case kind == "":
		return nil
	case kind == ChallengeZoom && scheme == SchemeHMAC:
		return nil
	case kind == ChallengeLark && scheme == SchemeToken && o.JSON != "":
		return nil
	case kind == ChallengeMeta && !UsesPublicKey(scheme):
		return nil
	case kind != ChallengeZoom && kind != ChallengeLark && kind != ChallengeMeta:
		return fmt.Errorf("challenge: unknown %q (want %s, %s or %s)", kind, ChallengeZoom, ChallengeLark, ChallengeMeta)
	}
	return fmt.Errorf("challenge: %s needs scheme %s", kind, map[string]string{
		ChallengeZoom: SchemeHMAC, ChallengeLark: SchemeToken + " with json", ChallengeMeta: "with secrets"}[kind])
}

// metaChallenge answers Meta's subscription check in front of any
// verifier: a GET with hub.mode=subscribe, which Meta does not sign.
type metaChallenge struct {
	Verifier
	token [sha256.Size]byte
}

func (v metaChallenge) Challenge(r Request) (*Answer, error) {
	q, ok := r.(QueryRequest)
	if !ok || string(q.Method()) != "GET" || string(q.Query("hub.mode")) != "subscribe" {
		return nil, nil
	}
	got := sha256.Sum256(q.Query("hub.verify_token"))
	if subtle.ConstantTimeCompare(got[:], v.token[:]) != 1 {
		return nil, reject("hub.verify_token does not match")
	}
	c := q.Query("hub.challenge")
	if len(c) == 0 || len(c) > maxChallenge {
		return nil, reject("missing or too long hub.challenge")
	}
	return &Answer{ContentType: "text/plain; charset=utf-8", Body: append([]byte(nil), c...)}, nil
}

// zoomChallenge wraps scheme hmac for Zoom.
type zoomChallenge struct{ *generic }

func (v zoomChallenge) Challenge(r Request) (*Answer, error) {
	body := r.Body()
	if !extract.ValidJSON(body) || gjson.GetBytes(body, "event").Str != "endpoint.url_validation" {
		return nil, nil
	}
	i, err := v.verify(r)
	if err != nil {
		return nil, err
	}
	plain, err := jsonString(body, "payload.plainToken")
	if err != nil {
		return nil, err
	}
	if len(plain) > maxChallenge {
		return nil, reject("payload.plainToken too long")
	}
	mac := hmac.New(sha256.New, v.secrets[i])
	mac.Write(plain)
	return jsonAnswer(map[string]string{"plainToken": string(plain), "encryptedToken": hex.EncodeToString(mac.Sum(nil))})
}

// larkChallenge wraps scheme token for Lark.
type larkChallenge struct{ *token }

func (v larkChallenge) Challenge(r Request) (*Answer, error) {
	body := r.Body()
	if !extract.ValidJSON(body) || gjson.GetBytes(body, "type").Str != "url_verification" {
		return nil, nil
	}
	tok, err := jsonString(body, "token")
	if err != nil {
		return nil, err
	}
	if err := v.check(tok); err != nil {
		return nil, err
	}
	c, err := jsonString(body, "challenge")
	if err != nil {
		return nil, err
	}
	if len(c) > maxChallenge {
		return nil, reject("challenge too long")
	}
	return jsonAnswer(map[string]string{"challenge": string(c)})
}

func jsonAnswer(v map[string]string) (*Answer, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encode answer: %w", err) // unreachable: strings always encode
	}
	return &Answer{ContentType: "application/json", Body: b}, nil
}
