package auth_test

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentstream/agentstream/auth"
	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var secret = []byte("0123456789abcdef0123456789abcdef")

func newAuth(t *testing.T, cfg auth.Config) *auth.Authenticator {
	t.Helper()
	a, err := auth.New(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(a.Close)
	return a
}

func sign(t *testing.T, m jwt.SigningMethod, key any, claims jwt.MapClaims, kid string) string {
	t.Helper()
	tok := jwt.NewWithClaims(m, claims)
	if kid != "" {
		tok.Header["kid"] = kid
	}
	s, err := tok.SignedString(key)
	require.NoError(t, err)
	return s
}

func TestGlob(t *testing.T) {
	for _, tc := range []struct {
		pat, s string
		ok     bool
	}{
		{"*", "", true}, {"*", "abc", true}, {"team-*", "team-1", true}, {"team-*", "team-", true},
		{"team-*", "other-1", false}, {"a*b*c", "aXXbYYc", true}, {"a*b*c", "aXXbYY", false},
		{"exact", "exact", true}, {"exact", "exactly", false}, {"*-prod", "eu-prod", true},
		{"*-prod", "eu-prod-2", false}, {"a**", "a", true}, {"", "", true}, {"", "a", false},
	} {
		require.Equal(t, tc.ok, auth.Glob(tc.pat, tc.s), "%q %q", tc.pat, tc.s)
	}
}

func TestMayUse(t *testing.T) {
	owner := &auth.Principal{Subject: "alice"}
	require.True(t, owner.MayUse("t1", "alice"))
	require.False(t, owner.MayUse("t1", "bob"))
	require.True(t, (&auth.Principal{Subject: "root", Admin: true}).MayUse("t1", "bob"))
	granted := &auth.Principal{Subject: "carol", Threads: []string{"shared-*"}}
	require.True(t, granted.MayUse("shared-9", "bob"))
	require.False(t, granted.MayUse("t1", "bob"))
	var none *auth.Principal
	require.False(t, none.MayUse("t1", ""))
}

// TestHS256: every way a token can be wrong is refused with
// ErrInvalidCredential (and ErrExpired when it is that), and a good one
// gives its claims.
func TestHS256(t *testing.T) {
	now := time.Now()
	a := newAuth(t, auth.Config{HS256Secret: secret, Audience: "agentstream", Issuer: "https://issuer.example", Leeway: 2 * time.Second})
	good := jwt.MapClaims{"sub": "alice", "aud": "agentstream", "iss": "https://issuer.example", "exp": now.Add(time.Hour).Unix(), "threads": []string{"team-*"}, "assistants": []string{"bot-*"}}
	p, err := a.Verify(sign(t, jwt.SigningMethodHS256, secret, good, ""))
	require.NoError(t, err)
	require.Equal(t, "alice", p.Subject)
	require.False(t, p.Admin)
	require.Equal(t, []string{"team-*"}, p.Threads)
	require.Equal(t, []string{"bot-*"}, p.Assistants)
	require.WithinDuration(t, now.Add(time.Hour+2*time.Second), p.Expires, time.Second)

	with := func(k string, v any) jwt.MapClaims {
		c := jwt.MapClaims{}
		for kk, vv := range good {
			c[kk] = vv
		}
		if v == nil {
			delete(c, k)
		} else {
			c[k] = v
		}
		return c
	}
	p, err = a.Verify(sign(t, jwt.SigningMethodHS256, secret, with("role", "admin"), ""))
	require.NoError(t, err)
	require.True(t, p.Admin)
	p, err = a.Verify(sign(t, jwt.SigningMethodHS256, secret, with("roles", []string{"reader", "admin"}), ""))
	require.NoError(t, err)
	require.True(t, p.Admin)
	// Within the leeway an expired token still passes.
	_, err = a.Verify(sign(t, jwt.SigningMethodHS256, secret, with("exp", now.Add(-time.Second).Unix()), ""))
	require.NoError(t, err)

	for name, tok := range map[string]string{
		"expired":         sign(t, jwt.SigningMethodHS256, secret, with("exp", now.Add(-time.Minute).Unix()), ""),
		"not yet valid":   sign(t, jwt.SigningMethodHS256, secret, with("nbf", now.Add(time.Minute).Unix()), ""),
		"wrong audience":  sign(t, jwt.SigningMethodHS256, secret, with("aud", "someone-else"), ""),
		"no audience":     sign(t, jwt.SigningMethodHS256, secret, with("aud", nil), ""),
		"wrong issuer":    sign(t, jwt.SigningMethodHS256, secret, with("iss", "https://evil.example"), ""),
		"no subject":      sign(t, jwt.SigningMethodHS256, secret, with("sub", nil), ""),
		"bad signature":   sign(t, jwt.SigningMethodHS256, []byte("another secret of at least 32 bytes!"), good, ""),
		"HS512":           sign(t, jwt.SigningMethodHS512, secret, good, ""),
		"alg none":        sign(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, good, ""),
		"malformed":       "not.a.jwt",
		"truncated":       sign(t, jwt.SigningMethodHS256, secret, good, "")[:40] + ".x.y",
		"garbage base64":  "e30.!!!.???",
		"empty signature": strings.Join(strings.Split(sign(t, jwt.SigningMethodHS256, secret, good, ""), ".")[:2], ".") + ".",
	} {
		_, err := a.Verify(tok)
		require.ErrorIs(t, err, auth.ErrInvalidCredential, name)
		require.Equal(t, name == "expired", isExpired(err), name)
	}
}

func isExpired(err error) bool {
	return err != nil && strings.Contains(err.Error(), auth.ErrExpired.Error())
}

func TestPublicKeys(t *testing.T) {
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	edPub, edKey, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	file := writePEM(t, rsaKey.Public(), ecKey.Public(), edPub)
	keys, err := auth.ReadPublicKeysFile(file)
	require.NoError(t, err)
	require.Len(t, keys, 3)
	a := newAuth(t, auth.Config{PublicKeys: keys})
	claims := jwt.MapClaims{"sub": "svc", "exp": time.Now().Add(time.Minute).Unix()}
	for name, tok := range map[string]string{
		"RS256": sign(t, jwt.SigningMethodRS256, rsaKey, claims, ""),
		"PS256": sign(t, jwt.SigningMethodPS256, rsaKey, claims, ""),
		"ES256": sign(t, jwt.SigningMethodES256, ecKey, claims, ""),
		"EdDSA": sign(t, jwt.SigningMethodEdDSA, edKey, claims, ""),
	} {
		p, err := a.Verify(tok)
		require.NoError(t, err, name)
		require.Equal(t, "svc", p.Subject)
	}
	other, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	_, err = a.Verify(sign(t, jwt.SigningMethodRS256, other, claims, ""))
	require.ErrorIs(t, err, auth.ErrInvalidCredential, "a key not in the file")
	// Algorithm confusion: an HS256 token "signed" with the public key's
	// PEM is refused, as this server takes no HS256.
	pemBytes, _ := os.ReadFile(file)
	_, err = a.Verify(sign(t, jwt.SigningMethodHS256, pemBytes, claims, ""))
	require.ErrorIs(t, err, auth.ErrInvalidCredential)
}

func writePEM(t *testing.T, keys ...crypto.PublicKey) string {
	t.Helper()
	var b strings.Builder
	for _, k := range keys {
		der, err := x509.MarshalPKIXPublicKey(k)
		require.NoError(t, err)
		require.NoError(t, pem.Encode(&b, &pem.Block{Type: "PUBLIC KEY", Bytes: der}))
	}
	p := filepath.Join(t.TempDir(), "keys.pem")
	require.NoError(t, os.WriteFile(p, []byte(b.String()), 0o600))
	return p
}

// jwksServer serves a JWK Set of RSA keys that the test rotates.
type jwksServer struct {
	mu      sync.Mutex
	keys    map[string]*rsa.PrivateKey
	fetches atomic.Int32
}

func (s *jwksServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.fetches.Add(1)
	s.mu.Lock()
	defer s.mu.Unlock()
	var set struct {
		Keys []map[string]string `json:"keys"`
	}
	for kid, k := range s.keys {
		set.Keys = append(set.Keys, map[string]string{
			"kty": "RSA", "kid": kid, "alg": "RS256", "use": "sig",
			"n": base64.RawURLEncoding.EncodeToString(k.N.Bytes()),
			"e": base64.RawURLEncoding.EncodeToString(big.NewInt(int64(k.E)).Bytes()),
		})
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(set)
}

func (s *jwksServer) rotate(kid string, k *rsa.PrivateKey) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.keys = map[string]*rsa.PrivateKey{kid: k}
}

// TestJWKSRotation: keys are fetched at start, a token signed by a key
// published later is accepted once the set is fetched again for its
// unknown key id, and a retired key's tokens are refused after a refresh.
func TestJWKSRotation(t *testing.T) {
	k1, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	k2, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	js := &jwksServer{}
	js.rotate("k1", k1)
	ts := httptest.NewServer(js)
	defer ts.Close()
	a := newAuth(t, auth.Config{JWKSURL: ts.URL, JWKSUnknownKIDEvery: 10 * time.Millisecond, JWKSRefresh: time.Hour})
	require.Equal(t, int32(1), js.fetches.Load(), "fetched once at start")
	claims := jwt.MapClaims{"sub": "svc", "exp": time.Now().Add(time.Minute).Unix()}
	p, err := a.Verify(sign(t, jwt.SigningMethodRS256, k1, claims, "k1"))
	require.NoError(t, err)
	require.Equal(t, "svc", p.Subject)
	require.Equal(t, int32(1), js.fetches.Load(), "a known key is served from the cache")

	js.rotate("k2", k2)
	time.Sleep(20 * time.Millisecond) // past the unknown-kid rate limit
	_, err = a.Verify(sign(t, jwt.SigningMethodRS256, k2, claims, "k2"))
	require.NoError(t, err, "the new key is fetched for its unknown kid")
	require.GreaterOrEqual(t, js.fetches.Load(), int32(2))
	_, err = a.Verify(sign(t, jwt.SigningMethodRS256, k1, claims, "k1"))
	require.ErrorIs(t, err, auth.ErrInvalidCredential, "the retired key is gone from the refreshed set")
	_, err = a.Verify(sign(t, jwt.SigningMethodRS256, k1, claims, ""))
	require.ErrorIs(t, err, auth.ErrInvalidCredential, "without a kid, every key of the set is tried")
	_, err = a.Verify(sign(t, jwt.SigningMethodRS256, k2, claims, ""))
	require.NoError(t, err)
}

// TestJWKSUnknownKIDFailsFast: a token naming a key id the set does not
// hold, while the set may not be fetched again yet, is refused at once
// (it held its request for up to a minute), and the lookup ends with
// Close.
func TestJWKSUnknownKIDFailsFast(t *testing.T) {
	k1, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	js := &jwksServer{}
	js.rotate("k1", k1)
	ts := httptest.NewServer(js)
	defer ts.Close()
	a := newAuth(t, auth.Config{JWKSURL: ts.URL, JWKSUnknownKIDEvery: 30 * time.Second, JWKSUnknownKIDWait: 300 * time.Millisecond})
	claims := jwt.MapClaims{"sub": "svc", "exp": time.Now().Add(time.Minute).Unix()}
	// The first unknown id may fetch the set again at once: it does, and
	// is refused since the set still lacks it.
	_, err = a.Verify(sign(t, jwt.SigningMethodRS256, k1, claims, "nope-1"))
	require.ErrorIs(t, err, auth.ErrInvalidCredential)
	require.Eventually(t, func() bool { return js.fetches.Load() == 2 }, 5*time.Second, 10*time.Millisecond)
	// The next may not fetch for 30 s: refused after the short wait, not
	// when the rate limit allows the next fetch (the library's wait).
	for range 3 {
		began := time.Now()
		_, err = a.Verify(sign(t, jwt.SigningMethodRS256, k1, claims, "nope-2"))
		require.ErrorIs(t, err, auth.ErrInvalidCredential)
		require.Contains(t, err.Error(), "retry shortly")
		require.Less(t, time.Since(began), 10*time.Second, "refused without waiting 30 s for the rate limit")
	}
	require.Equal(t, int32(2), js.fetches.Load(), "no fetch past the rate limit")
	// A known key is still served at once.
	p, err := a.Verify(sign(t, jwt.SigningMethodRS256, k1, claims, "k1"))
	require.NoError(t, err)
	require.Equal(t, "svc", p.Subject)
}

func TestJWKSUnreachableAtStart(t *testing.T) {
	ts := httptest.NewServer(http.NotFoundHandler())
	defer ts.Close()
	_, err := auth.New(context.Background(), auth.Config{JWKSURL: ts.URL})
	require.Error(t, err)
}

func TestAPIKeysAndCredentials(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "keys")
	require.NoError(t, os.WriteFile(file, []byte("# comment\n\nk-alice alice\nk-root root admin\nk-gina gina producer assistants=team-*,helper\n"), 0o600))
	keys, err := auth.ReadAPIKeysFile(file)
	require.NoError(t, err)
	a := newAuth(t, auth.Config{APIKeys: keys, HS256Secret: secret})
	p, err := a.APIKey("k-alice")
	require.NoError(t, err)
	require.Equal(t, auth.Principal{Subject: "alice"}, *p)
	p, err = a.Check("k-root")
	require.NoError(t, err)
	require.True(t, p.Admin)
	p, err = a.Check("k-gina")
	require.NoError(t, err)
	require.True(t, p.Producer)
	require.Equal(t, []string{"team-*", "helper"}, p.Assistants)
	_, err = a.Check("k-nobody")
	require.ErrorIs(t, err, auth.ErrInvalidCredential)
	_, err = a.Check("")
	require.ErrorIs(t, err, auth.ErrNoCredential)

	for _, bad := range []string{"onlykey\n", "k p admin extra\n", "k p root\n", "a.b.c p\n", "k p\nk q\n", "# nothing\n", "k p admin assistants=x\n", "k p producer assistants=\n", "k p producer assistants=x extra\n"} {
		require.NoError(t, os.WriteFile(file, []byte(bad), 0o600))
		_, err := auth.ReadAPIKeysFile(file)
		require.Error(t, err, "%q", bad)
	}

	tok, err := auth.Mint(secret, auth.TokenOptions{Subject: "alice", TTL: time.Minute})
	require.NoError(t, err)
	for _, tc := range []struct {
		header, value, query string
		want                 string
	}{
		{"Authorization", "Bearer " + tok, "", "alice"},
		{"Authorization", "bearer " + tok, "", "alice"},
		{"X-Api-Key", "k-alice", "", "alice"},
		{"", "", "access_token=" + tok, "alice"},
		{"", "", "channels=x&access_token=k-root", "root"},
	} {
		r := httptest.NewRequest("GET", "/threads/t/stream?"+tc.query, nil)
		if tc.header != "" {
			r.Header.Set(tc.header, tc.value)
		}
		p, err := a.FromRequest(r)
		require.NoError(t, err, tc)
		require.Equal(t, tc.want, p.Subject)
	}
	r := httptest.NewRequest("GET", "/threads/t/stream", nil)
	r.Header.Set("Authorization", "Basic dXNlcjpwYXNz")
	_, err = a.FromRequest(r)
	require.ErrorIs(t, err, auth.ErrNoCredential, "a Basic header is no bearer token")
}

func TestSecretFileAndRedact(t *testing.T) {
	file := filepath.Join(t.TempDir(), "secret")
	require.NoError(t, os.WriteFile(file, []byte("  "+string(secret)+"\n"), 0o600))
	got, err := auth.ReadSecretFile(file)
	require.NoError(t, err)
	require.Equal(t, secret, got)
	require.NoError(t, os.WriteFile(file, []byte("short\n"), 0o600))
	_, err = auth.ReadSecretFile(file)
	require.ErrorContains(t, err, "at least 32 bytes")

	require.Equal(t, "channels=a&access_token=REDACTED&depth=1", auth.Redact("channels=a&access_token=eyJ.x.y&depth=1"))
	require.Equal(t, "since=3", auth.Redact("since=3"))
	// Keys are compared decoded, as the lookup reads them; every one is redacted.
	require.Equal(t, "access%5Ftoken=REDACTED", auth.Redact("access%5Ftoken=eyJ.x.y"))
	require.Equal(t, "%61ccess_token=REDACTED&access_token=REDACTED", auth.Redact("%61ccess_token=eyJ.a.b&access_token=eyJ.c.d"))
	r := httptest.NewRequest("GET", "/threads/t/stream?access%5Ftoken=eyJ.x.y", nil)
	require.Equal(t, "eyJ.x.y", auth.Credential(r), "the lookup reads the key decoded: so must Redact")
	_, err = auth.New(context.Background(), auth.Config{})
	require.Error(t, err, "no credential source")
}

// BenchmarkVerify is the credential check a connect pays: an HS256 JWT
// and an API key.
func BenchmarkVerify(b *testing.B) {
	a, err := auth.New(context.Background(), auth.Config{HS256Secret: secret, APIKeys: map[string]auth.Principal{"k-alice": {Subject: "alice"}}})
	if err != nil {
		b.Fatal(err)
	}
	defer a.Close()
	tok, err := auth.Mint(secret, auth.TokenOptions{Subject: "alice", TTL: time.Hour, Threads: []string{"team-*"}})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("hs256", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			if _, err := a.Check(tok); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("apikey", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			if _, err := a.Check("k-alice"); err != nil {
				b.Fatal(err)
			}
		}
	})
}
