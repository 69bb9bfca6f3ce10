package admin

import (
	"bytes"
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"net/http"
)

//go:embed dashboard.html
var dashboardHTML []byte

// dashboardPolicy lets the page run its own script and style and nothing else (each allowed by
// its hash, so that no text that found its way into the page could run), load nothing, talk
// to nothing but this server, and be framed by no other site.
var dashboardPolicy = "default-src 'none'; script-src " + inlineHash("<script>", "</script>") +
	"; style-src " + inlineHash("<style>", "</style>") +
	"; connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// inlineHash returns the CSP source that allows the page's one inline element between open
// and end.
func inlineHash(open, end string) string {
	_, rest, ok := bytes.Cut(dashboardHTML, []byte(open))
	body, _, ok2 := bytes.Cut(rest, []byte(end))
	if !ok || !ok2 {
		panic("admin: dashboard.html has no " + open)
	}
	sum := sha256.Sum256(body)
	return "'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"
}

// serveDashboard answers the dashboard page. It holds no figures (its script fetches
// /v1/status with the token), so it needs no token.
func serveDashboard(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Security-Policy", dashboardPolicy)
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(dashboardHTML)
}
