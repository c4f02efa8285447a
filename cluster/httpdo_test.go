package cluster

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// httpDo sends method url with body ("" for none) and, when token is
// set, the bearer token; it returns the status and at most 1 MiB of the
// answer's body. The tests of the node's HTTP endpoints share it.
func httpDo(t *testing.T, method, url, token, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, b
}

// getWith is httpDo for a GET, the body as text.
func getWith(t *testing.T, url, token string) (int, string) {
	t.Helper()
	code, b := httpDo(t, http.MethodGet, url, token, "")
	return code, string(b)
}
