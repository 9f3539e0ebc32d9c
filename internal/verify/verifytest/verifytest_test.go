package verifytest_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/verify/verifytest"
)

// The official vectors of PROVIDERS.md: each signer must reproduce them
// byte for byte, or the gateway's end-to-end tests would be testing against
// a misreading.
func TestSignersReproduceOfficialVectors(t *testing.T) {
	slackBody := []byte("token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c")
	squareBody := []byte(`{"merchant_id":"MLEFBHHSJGVHD","type":"webhooks.test_notification","event_id":"ac3ac95b-f97d-458c-a6e6-18981597e05f","created_at":"2022-07-13T20:30:59.037339943Z","data":{"type":"webhooks","id":"bc368e64-01aa-407e-b46e-3231809b1129"}}`)
	standard, err := verifytest.StandardWebhooks("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "msg_p5jXN8AQM9LWM0D4loKWxJek",
		[]byte(`{"test": 2432232314}`), time.Unix(1614265330, 0))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		header http.Header
		key    string
		want   string
	}{
		{"github", verifytest.GitHub("It's a Secret to Everybody", []byte("Hello, World!")),
			"X-Hub-Signature-256", "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"},
		{"standard-webhooks", standard,
			"webhook-signature", "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="},
		{"slack", verifytest.Slack("8f742231b10e8888abcd99yyyzzz85a5", slackBody, time.Unix(1531420618, 0)),
			"X-Slack-Signature", "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503"},
		{"square", verifytest.Square("Ibxx_5AKakO-3qeNVR61Dw", "https://webhook.site/679a4f3a-dcfa-49ee-bac5-9d0edad886b9", squareBody),
			"x-square-hmacsha256-signature", "GF4YkrJgGBDZ9NIYbNXBnMzqb2HoL4RW/S6vkZ9/2N4="},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.header.Get(tt.key); got != tt.want {
				t.Errorf("%s = %q, want %q", tt.key, got, tt.want)
			}
		})
	}
}

func TestAdyenHMACOfficialVector(t *testing.T) {
	got, err := verifytest.AdyenHMAC("DFB1EB5485895CFA84146406857104ABB4CBCABDC8AAF103A624C8F6A3EAAB00",
		"pspReference:originalReference:merchantAccount:reference:1000:EUR:EVENT:true")
	if err != nil {
		t.Fatal(err)
	}
	if want := "ipnxGCaUZ4l8TUW75a71/ghd2Fe5ffvX0pV4TLTntIc="; got != want {
		t.Errorf("AdyenHMAC = %q, want %q", got, want)
	}
	if _, err := verifytest.AdyenHMAC("not hex", "x"); err == nil {
		t.Error("AdyenHMAC accepted a key that is not hex")
	}
}
