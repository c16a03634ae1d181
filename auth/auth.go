// Package auth owns who a client is and what it may use: it checks the
// credentials a request carries (JWTs signed with a shared secret, a
// public key or a key from a JWKS endpoint; static API keys), turns them
// into a [Principal], and decides whether a principal may use a thread
// that has a given owner ([Principal.MayUse]).
//
// It knows neither threads nor transports: the server stores each thread's
// owner with the thread's state, and the transports take the credential
// from the request ([FromRequest]) and ask the server. JWTs are verified by
// github.com/golang-jwt/jwt/v5 and JWKS key sets fetched, cached and
// rotated by github.com/MicahParks/keyfunc/v3; nothing here parses a token
// by hand.
package auth

import (
	"context"
	"crypto"
	"crypto/sha256"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/MicahParks/jwkset"
	"github.com/MicahParks/keyfunc/v3"
	"github.com/golang-jwt/jwt/v5"
	"golang.org/x/time/rate"
)

// Principal is an authenticated client.
type Principal struct {
	// Subject names the principal (a JWT's sub, an API key's principal);
	// the threads it creates are owned by this name.
	Subject string
	// Admin may use every thread, and read /metrics.
	Admin bool
	// Producer may publish events into the threads it may use (POST
	// /threads/{id}/events): a JWT with the role "producer", an API key
	// listed with "producer". Others read and send commands only. Admins
	// may publish too.
	Producer bool
	// Threads lists thread-id patterns ("*" matches any run of
	// characters) the principal may use besides its own threads.
	Threads []string
	// Assistants lists the assistant-id patterns a producer may serve as
	// a remote worker; none: the ids no other principal serves (the
	// first to serve one owns it; see server.AssistantGrant).
	Assistants []string
	// Store lists the namespaces of the long-term store (the Platform
	// API's /store) the principal shares with every principal granted
	// them: namespace prefixes, labels joined by ".", "*" matching any
	// one label. Its items in other namespaces are its own, seen by no
	// other principal (admins keep theirs in the shared store).
	Store []string
	// Expires is when the credential stops being valid (its exp plus the
	// allowed clock skew); zero for one that does not expire (API keys).
	Expires time.Time
}

// MayUse reports whether the principal may read and act on a thread that
// owner owns: its own, any as an admin, or one its Threads grant.
func (p *Principal) MayUse(threadID, owner string) bool {
	if p == nil {
		return false
	}
	if p.Admin || owner == p.Subject {
		return true
	}
	for _, pat := range p.Threads {
		if Glob(pat, threadID) {
			return true
		}
	}
	return false
}

// Glob reports whether s matches pattern, where "*" matches any run of
// characters (none included) and every other character itself.
func Glob(pattern, s string) bool {
	star, mark := -1, 0 // the last star seen, and where s stood then
	i, j := 0, 0
	for j < len(s) {
		switch {
		case i < len(pattern) && pattern[i] == '*':
			star, mark = i, j
			i++
		case i < len(pattern) && pattern[i] == s[j]:
			i++
			j++
		case star >= 0: // let the last star take one more character
			mark++
			i, j = star+1, mark
		default:
			return false
		}
	}
	for i < len(pattern) && pattern[i] == '*' {
		i++
	}
	return i == len(pattern)
}

// Errors a credential check returns. ErrNoCredential: the request carried
// none; every other failure wraps ErrInvalidCredential (an expired token
// also wraps ErrExpired).
var (
	ErrNoCredential      = errors.New("no credential: send a bearer token (Authorization: Bearer), an API key (x-api-key) or an access_token query parameter")
	ErrInvalidCredential = errors.New("invalid credential")
	ErrExpired           = errors.New("credential expired")
)

// DefaultLeeway is Config.Leeway's default: the clock skew allowed when
// checking exp and nbf.
const DefaultLeeway = 5 * time.Second

// Config says which credentials an Authenticator accepts. At least one
// source must be set.
type Config struct {
	// HS256Secret accepts HS256 JWTs signed with it.
	HS256Secret []byte
	// PublicKeys accept RS256/384/512, PS256/384/512, ES256/384/512 and
	// EdDSA JWTs signed by the matching private keys.
	PublicKeys []crypto.PublicKey
	// JWKSURL accepts JWTs signed by a key of this JWK Set, fetched at
	// start, refreshed every JWKSRefresh (1h) and when a token names a key
	// id it does not know (at most once per JWKSUnknownKIDEvery, 1m). A
	// token naming an unknown key id waits at most JWKSUnknownKIDWait
	// (DefaultJWKSUnknownKIDWait, 2s) for the set to be fetched again,
	// and is refused at once while a fetch is not allowed yet: the fetch
	// goes on in the background, and the client may retry.
	JWKSURL             string
	JWKSRefresh         time.Duration
	JWKSUnknownKIDEvery time.Duration
	JWKSUnknownKIDWait  time.Duration
	// HTTPClient fetches the JWK Set (http.DefaultClient's settings with
	// a 10s timeout when nil).
	HTTPClient *http.Client
	// APIKeys accepts static keys, each standing for its principal.
	APIKeys map[string]Principal
	// Audience and Issuer, when set, must be a JWT's aud (one of) and iss.
	Audience, Issuer string
	// Leeway is the clock skew allowed on exp and nbf (DefaultLeeway; a
	// negative value: none).
	Leeway time.Duration
	// Now is the clock (time.Now).
	Now func() time.Time
}

// Authenticator checks credentials. It is safe for concurrent use. Close
// it to stop its JWK Set refresh.
type Authenticator struct {
	secret  []byte
	pubs    []crypto.PublicKey
	jwks    keyfunc.Keyfunc
	keys    map[[sha256.Size]byte]Principal
	parser  *jwt.Parser
	leeway  time.Duration
	now     func() time.Time
	cancel  context.CancelFunc
	hasJWTs bool
	jwksCtx context.Context

	// A token naming an unknown key id: one background lookup at a time
	// fetches the set again (rate limited by the library), and callers
	// wait for it at most unknownWait.
	unknownWait  time.Duration
	unknownEvery time.Duration
	lookupMu     sync.Mutex
	lookup       chan struct{} // closed when the lookup under way ends; nil for none
	lookups      sync.WaitGroup
	stopped      context.Context // already cancelled: reads the set without waiting
}

// DefaultJWKSUnknownKIDWait is Config.JWKSUnknownKIDWait's default.
const DefaultJWKSUnknownKIDWait = 2 * time.Second

// New returns an Authenticator for cfg. With a JWKS URL it fetches the key
// set before returning, and ctx (or Close) ends its refreshing.
func New(ctx context.Context, cfg Config) (*Authenticator, error) {
	if len(cfg.HS256Secret) == 0 && len(cfg.PublicKeys) == 0 && cfg.JWKSURL == "" && len(cfg.APIKeys) == 0 {
		return nil, errors.New("auth: no credential source (a secret, public keys, a JWKS URL or API keys)")
	}
	a := &Authenticator{secret: cfg.HS256Secret, pubs: cfg.PublicKeys, now: cfg.Now, leeway: cfg.Leeway}
	if a.now == nil {
		a.now = time.Now
	}
	switch {
	case a.leeway == 0:
		a.leeway = DefaultLeeway
	case a.leeway < 0:
		a.leeway = 0
	}
	a.keys = make(map[[sha256.Size]byte]Principal, len(cfg.APIKeys))
	for k, p := range cfg.APIKeys {
		if k == "" || p.Subject == "" {
			return nil, errors.New("auth: an API key and its principal must not be empty")
		}
		a.keys[sha256.Sum256([]byte(k))] = p
	}
	var methods []string
	if len(a.secret) > 0 {
		methods = append(methods, jwt.SigningMethodHS256.Alg())
	}
	if len(a.pubs) > 0 || cfg.JWKSURL != "" {
		methods = append(methods, "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA")
	}
	a.hasJWTs = len(methods) > 0
	opts := []jwt.ParserOption{jwt.WithValidMethods(methods), jwt.WithLeeway(a.leeway), jwt.WithTimeFunc(a.now)}
	if cfg.Audience != "" {
		opts = append(opts, jwt.WithAudience(cfg.Audience))
	}
	if cfg.Issuer != "" {
		opts = append(opts, jwt.WithIssuer(cfg.Issuer))
	}
	a.parser = jwt.NewParser(opts...)
	if cfg.JWKSURL != "" {
		refresh := cfg.JWKSRefresh
		if refresh <= 0 {
			refresh = time.Hour
		}
		unknown := cfg.JWKSUnknownKIDEvery
		if unknown <= 0 {
			unknown = time.Minute
		}
		client := cfg.HTTPClient
		if client == nil {
			client = &http.Client{Timeout: 10 * time.Second}
		}
		kctx, cancel := context.WithCancel(ctx)
		fail := false
		k, err := keyfunc.NewDefaultOverrideCtx(kctx, []string{cfg.JWKSURL}, keyfunc.Override{
			Client:                    client,
			RefreshInterval:           refresh,
			RefreshUnknownKID:         rate.NewLimiter(rate.Every(unknown), 1),
			NoErrorReturnFirstHTTPReq: &fail, // a server that cannot fetch its keys says so at start
			RefreshErrorHandlerFunc: func(string) func(context.Context, error) {
				return func(context.Context, error) {} // the old keys stay in use; tokens they do not verify are refused
			},
		})
		if err != nil {
			cancel()
			return nil, fmt.Errorf("auth: JWKS %s: %w", cfg.JWKSURL, err)
		}
		a.jwks, a.cancel, a.jwksCtx = k, cancel, kctx
		a.unknownWait, a.unknownEvery = cfg.JWKSUnknownKIDWait, unknown
		if a.unknownWait <= 0 {
			a.unknownWait = DefaultJWKSUnknownKIDWait
		}
		stopped, stop := context.WithCancel(context.Background())
		stop()
		a.stopped = stopped
	}
	return a, nil
}

// Close stops the JWK Set's refreshing.
func (a *Authenticator) Close() {
	if a.cancel != nil {
		a.cancel()
	}
	a.lookups.Wait()
}

// jwksKey is the JWK Set's key for a token that names a key id. The set
// is read without waiting; an id it does not hold starts a background
// lookup (which fetches the set again, at most once per
// JWKSUnknownKIDEvery) and waits for it at most unknownWait.
func (a *Authenticator) jwksKey(t *jwt.Token) (any, error) {
	k, err := a.jwks.KeyfuncCtx(a.stopped)(t)
	if err == nil || !(errors.Is(err, jwkset.ErrKeyNotFound) || errors.Is(err, context.Canceled)) {
		return k, err
	}
	a.lookupMu.Lock()
	done := a.lookup
	if done == nil {
		done = make(chan struct{})
		a.lookup = done
		a.lookups.Add(1)
		go func() {
			defer a.lookups.Done()
			_, _ = a.jwks.KeyfuncCtx(a.jwksCtx)(t) // waits for the rate limit (at most a minute), then fetches
			a.lookupMu.Lock()
			a.lookup = nil
			a.lookupMu.Unlock()
			close(done)
		}()
	}
	a.lookupMu.Unlock()
	timer := time.NewTimer(a.unknownWait)
	defer timer.Stop()
	select {
	case <-done:
		if k, err = a.jwks.KeyfuncCtx(a.stopped)(t); err == nil {
			return k, nil
		}
		return nil, fmt.Errorf("the token's key id %v is not in the key set (fetched again at most once per %v)", t.Header["kid"], a.unknownEvery)
	case <-timer.C:
		return nil, fmt.Errorf("the token's key id %v is not in the key set; the set is being fetched again, retry shortly", t.Header["kid"])
	case <-a.jwksCtx.Done():
		return nil, a.jwksCtx.Err()
	}
}

// claims are the JWT claims agentstream reads.
type claims struct {
	jwt.RegisteredClaims
	Role    string   `json:"role,omitempty"`
	Roles   []string `json:"roles,omitempty"`
	Threads []string `json:"threads,omitempty"`
	// Assistants: the assistant-id patterns a producer may serve.
	Assistants []string `json:"assistants,omitempty"`
	// Store: the shared store namespaces (Principal.Store).
	Store []string `json:"store,omitempty"`
}

// key finds the key that verifies t: the secret for HS256, otherwise the
// public keys and the JWK Set's (by key id when the token names one).
func (a *Authenticator) key(t *jwt.Token) (any, error) {
	if _, hmac := t.Method.(*jwt.SigningMethodHMAC); hmac {
		return a.secret, nil
	}
	if a.jwks != nil {
		if _, named := t.Header["kid"]; named {
			k, err := a.jwksKey(t)
			if err == nil || len(a.pubs) == 0 {
				return k, err
			}
		}
	}
	set := jwt.VerificationKeySet{}
	for _, k := range a.pubs {
		set.Keys = append(set.Keys, k)
	}
	if a.jwks != nil {
		if js, err := a.jwks.VerificationKeySet(a.jwksCtx); err == nil {
			set.Keys = append(set.Keys, js.Keys...)
		}
	}
	if len(set.Keys) == 0 {
		return nil, errors.New("no key to verify it")
	}
	return set, nil
}

// Verify checks a JWT and returns its principal.
func (a *Authenticator) Verify(token string) (*Principal, error) {
	if !a.hasJWTs {
		return nil, fmt.Errorf("%w: this server takes API keys only", ErrInvalidCredential)
	}
	var c claims
	if _, err := a.parser.ParseWithClaims(token, &c, a.key); err != nil {
		if errors.Is(err, jwt.ErrTokenExpired) {
			return nil, fmt.Errorf("%w: %w: %v", ErrInvalidCredential, ErrExpired, err)
		}
		return nil, fmt.Errorf("%w: %v", ErrInvalidCredential, err)
	}
	if c.Subject == "" {
		return nil, fmt.Errorf("%w: the token has no sub", ErrInvalidCredential)
	}
	p := &Principal{Subject: c.Subject, Admin: c.Role == "admin" || slices.Contains(c.Roles, "admin"), Producer: c.Role == "producer" || slices.Contains(c.Roles, "producer"), Threads: c.Threads, Assistants: c.Assistants, Store: c.Store}
	if c.ExpiresAt != nil {
		p.Expires = c.ExpiresAt.Add(a.leeway)
	}
	return p, nil
}

// APIKey returns the principal of a static key.
func (a *Authenticator) APIKey(key string) (*Principal, error) {
	p, ok := a.keys[sha256.Sum256([]byte(key))]
	if !ok {
		return nil, fmt.Errorf("%w: unknown API key", ErrInvalidCredential)
	}
	return &p, nil
}

// Check returns the principal of a credential as a client sends it: a JWT
// (three dot-separated parts) or an API key.
func (a *Authenticator) Check(credential string) (*Principal, error) {
	if credential == "" {
		return nil, ErrNoCredential
	}
	if strings.Count(credential, ".") == 2 {
		return a.Verify(credential)
	}
	return a.APIKey(credential)
}

// AccessTokenParam is the query parameter that carries a credential for
// clients that cannot set headers (a browser's EventSource and WebSocket).
// Logs must not show it (see Redact).
const AccessTokenParam = "access_token"

// Credential returns the credential a request carries: an Authorization
// bearer token, an x-api-key header, or the access_token query parameter,
// in that order.
func Credential(r *http.Request) string {
	if h := r.Header.Get("Authorization"); h != "" {
		if scheme, tok, ok := strings.Cut(h, " "); ok && strings.EqualFold(scheme, "Bearer") {
			return strings.TrimSpace(tok)
		}
	}
	if k := r.Header.Get("X-Api-Key"); k != "" {
		return strings.TrimSpace(k)
	}
	if r.URL.RawQuery != "" {
		return r.URL.Query().Get(AccessTokenParam) // keys decoded: Redact reads them the same way
	}
	return ""
}

// FromRequest returns the principal of the credential r carries.
func (a *Authenticator) FromRequest(r *http.Request) (*Principal, error) {
	return a.Check(Credential(r))
}

// Redact returns a raw query with the value of every access_token
// parameter replaced, for logs. Keys are compared decoded, as the lookup
// (Credential) reads them: access%5Ftoken is access_token too.
func Redact(rawQuery string) string {
	if !strings.Contains(rawQuery, AccessTokenParam) && !strings.Contains(rawQuery, "%") && !strings.Contains(rawQuery, "+") {
		return rawQuery
	}
	parts := strings.Split(rawQuery, "&")
	for i, p := range parts {
		k, _, _ := strings.Cut(p, "=")
		if dk, err := url.QueryUnescape(k); k == AccessTokenParam || err == nil && dk == AccessTokenParam {
			parts[i] = k + "=REDACTED"
		}
	}
	return strings.Join(parts, "&")
}

// RedactURL is raw with its password, if any, replaced by REDACTED, for
// logs, errors and printed configuration; a URL that does not parse is
// REDACTED whole, since any part of it could be a secret.
func RedactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "REDACTED"
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), "REDACTED")
	}
	return u.String()
}

// ReadSecretFile reads an HS256 secret: the file's contents, trimmed of
// surrounding white space.
func ReadSecretFile(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	b = []byte(strings.TrimSpace(string(b)))
	if len(b) < 32 {
		return nil, fmt.Errorf("%s: an HS256 secret needs at least 32 bytes, this one has %d", path, len(b))
	}
	return b, nil
}

// ReadPublicKeysFile reads PEM public keys (PKIX "PUBLIC KEY" blocks, or
// certificates): RSA, ECDSA or Ed25519.
func ReadPublicKeysFile(path string) ([]crypto.PublicKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var keys []crypto.PublicKey
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			break
		}
		switch blk.Type {
		case "PUBLIC KEY":
			k, err := x509.ParsePKIXPublicKey(blk.Bytes)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", path, err)
			}
			keys = append(keys, k)
		case "RSA PUBLIC KEY":
			k, err := x509.ParsePKCS1PublicKey(blk.Bytes)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", path, err)
			}
			keys = append(keys, k)
		case "CERTIFICATE":
			c, err := x509.ParseCertificate(blk.Bytes)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", path, err)
			}
			keys = append(keys, c.PublicKey)
		default:
			return nil, fmt.Errorf("%s: a %q PEM block is not a public key", path, blk.Type)
		}
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("%s: no PEM public key in it", path)
	}
	return keys, nil
}

// ReadAPIKeysFile reads static API keys, one per line: KEY PRINCIPAL
// [admin|producer [assistants=PATTERN,...]]. Blank lines and lines
// starting with # are skipped.
func ReadAPIKeysFile(path string) (map[string]Principal, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	keys := map[string]Principal{}
	for n, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		// KEY PRINCIPAL [admin|producer] [assistants=A,...] [store=NS,...]
		var assistants, store []string
		for len(f) > 2 {
			last := f[len(f)-1]
			name, list, isOpt := strings.Cut(last, "=")
			if !isOpt {
				break
			}
			var items []string
			for _, a := range strings.Split(list, ",") {
				if a != "" {
					items = append(items, a)
				}
			}
			switch {
			case name == "assistants" && assistants == nil && len(items) > 0:
				assistants = items
			case name == "store" && store == nil && len(items) > 0:
				store = items
			default:
				return nil, fmt.Errorf("%s:%d: %q: want assistants=PATTERN,... or store=NAMESPACE,..., each once and naming one at least", path, n+1, last)
			}
			f = f[:len(f)-1]
		}
		if len(f) < 2 || len(f) > 3 || (len(f) == 3 && f[2] != "admin" && f[2] != "producer") {
			return nil, fmt.Errorf("%s:%d: want KEY PRINCIPAL [admin|producer] [assistants=PATTERN,...] [store=NAMESPACE,...]", path, n+1)
		}
		if assistants != nil && (len(f) != 3 || f[2] != "producer") {
			return nil, fmt.Errorf("%s:%d: assistants= is for a producer's key", path, n+1)
		}
		if strings.Count(f[0], ".") == 2 {
			return nil, fmt.Errorf("%s:%d: an API key must not look like a JWT (two dots)", path, n+1)
		}
		if _, dup := keys[f[0]]; dup {
			return nil, fmt.Errorf("%s:%d: the key is listed twice", path, n+1)
		}
		keys[f[0]] = Principal{Subject: f[1], Admin: len(f) == 3 && f[2] == "admin", Producer: len(f) == 3 && f[2] == "producer", Assistants: assistants, Store: store}
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("%s: no key in it", path)
	}
	return keys, nil
}

// TokenOptions describe a token Mint makes.
type TokenOptions struct {
	Subject  string
	Admin    bool
	Producer bool // the role "producer": may publish events
	Threads  []string
	// Assistants are the assistant-id patterns a producer may serve.
	Assistants []string
	// Store are the shared store namespaces (Principal.Store).
	Store    []string
	TTL      time.Duration // 0: no exp
	Audience string
	Issuer   string
	Now      time.Time // time.Now() when zero
}

// Mint signs an HS256 token for development and tests (agentstream
// token).
func Mint(secret []byte, o TokenOptions) (string, error) {
	if o.Subject == "" {
		return "", errors.New("a token needs a subject")
	}
	now := o.Now
	if now.IsZero() {
		now = time.Now()
	}
	c := claims{RegisteredClaims: jwt.RegisteredClaims{Subject: o.Subject, IssuedAt: jwt.NewNumericDate(now), Issuer: o.Issuer}, Threads: o.Threads, Assistants: o.Assistants, Store: o.Store}
	if o.TTL > 0 {
		c.ExpiresAt = jwt.NewNumericDate(now.Add(o.TTL))
	}
	if o.Audience != "" {
		c.Audience = jwt.ClaimStrings{o.Audience}
	}
	switch {
	case o.Admin:
		c.Role = "admin"
	case o.Producer:
		c.Role = "producer"
	}
	return jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString(secret)
}

type ctxKey struct{}

// NewContext returns ctx carrying p (the transports pass a request's
// principal on this way).
func NewContext(ctx context.Context, p *Principal) context.Context {
	return context.WithValue(ctx, ctxKey{}, p)
}

// FromContext returns the principal NewContext put in ctx, or nil.
func FromContext(ctx context.Context) *Principal {
	p, _ := ctx.Value(ctxKey{}).(*Principal)
	return p
}
