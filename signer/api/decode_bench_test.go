package api

import (
	"bytes"
	"encoding/base64"
	"net/http/httptest"
	"strings"
	"testing"
)

// BenchmarkDecodeIntentBody measures the server's decode of one POST /v1/intents body
// as the bench's clients send it (200-byte value): strictKeys' pass over the top-level
// keys alone, and the whole decodeIntent (read, strict keys, JSON and base64, the
// apply's validation).
func BenchmarkDecodeIntentBody(b *testing.B) {
	body := []byte(`{"id":"c17-000123","op":"put","path":"bench/c17-000123","value":"` + base64.StdEncoding.EncodeToString([]byte(strings.Repeat("v", 200))) + `"}`)
	b.Run("strictKeys", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			var req IntentRequest
			if err := strictKeys(body, &req); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decodeIntent", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			r := httptest.NewRequest("POST", "/v1/intents?wait=signed", bytes.NewReader(body))
			w := httptest.NewRecorder()
			if _, _, _, err := decodeIntent(w, r); err != nil {
				b.Fatal(err)
			}
		}
	})
}
