package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/agentstream/agentstream/auth"
)

// authFlags are serve's --auth-* flags.
type authFlags struct {
	secretFile, jwksURL, publicKeyFile, apiKeysFile string
	audience, issuer                                string
	leeway, jwksRefresh, jwksUnknownWait            time.Duration
}

func (a *authFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&a.secretFile, "auth-hs256-secret-file", "", "accept HS256 JWTs signed with this file's contents (trimmed; at least 32 bytes)")
	fs.StringVar(&a.jwksURL, "auth-jwks-url", "", "accept JWTs (RS*, PS*, ES*, EdDSA) signed by a key of the JWK Set at this URL, fetched at start and refreshed hourly and on an unknown key id")
	fs.DurationVar(&a.jwksRefresh, "auth-jwks-refresh", time.Hour, "how often the --auth-jwks-url key set is fetched again")
	fs.DurationVar(&a.jwksUnknownWait, "auth-jwks-unknown-kid-wait", auth.DefaultJWKSUnknownKIDWait, "how long a token naming a key id the set lacks waits for the set to be fetched again (at most once a minute) before it is refused")
	fs.StringVar(&a.publicKeyFile, "auth-public-key-file", "", "accept JWTs (RS*, PS*, ES*, EdDSA) signed by the private key of one of this file's PEM public keys")
	fs.StringVar(&a.apiKeysFile, "auth-api-keys-file", "", "accept static API keys (x-api-key), one per line: KEY PRINCIPAL [admin|producer] (a producer may publish events)")
	fs.StringVar(&a.audience, "auth-audience", "", "a JWT's aud must name this")
	fs.StringVar(&a.issuer, "auth-issuer", "", "a JWT's iss must be this")
	fs.DurationVar(&a.leeway, "auth-leeway", auth.DefaultLeeway, "clock skew allowed on a JWT's exp and nbf")
}

// on reports whether any credential source is set.
func (a *authFlags) on() bool {
	return a.secretFile != "" || a.jwksURL != "" || a.publicKeyFile != "" || a.apiKeysFile != ""
}

// build returns the authenticator the flags describe, or nil when none is
// set; ctx ends its key set's refreshing.
func (a *authFlags) build(ctx context.Context) (*auth.Authenticator, error) {
	if !a.on() {
		if a.audience != "" || a.issuer != "" {
			return nil, errors.New("--auth-audience and --auth-issuer need a JWT source (--auth-hs256-secret-file, --auth-public-key-file or --auth-jwks-url)")
		}
		return nil, nil
	}
	cfg := auth.Config{JWKSURL: a.jwksURL, JWKSRefresh: a.jwksRefresh, JWKSUnknownKIDWait: a.jwksUnknownWait, Audience: a.audience, Issuer: a.issuer, Leeway: a.leeway}
	if cfg.Leeway == 0 {
		cfg.Leeway = -1 // --auth-leeway 0 means none
	}
	var err error
	if a.secretFile != "" {
		if cfg.HS256Secret, err = auth.ReadSecretFile(a.secretFile); err != nil {
			return nil, fmt.Errorf("--auth-hs256-secret-file: %w", err)
		}
	}
	if a.publicKeyFile != "" {
		if cfg.PublicKeys, err = auth.ReadPublicKeysFile(a.publicKeyFile); err != nil {
			return nil, fmt.Errorf("--auth-public-key-file: %w", err)
		}
	}
	if a.apiKeysFile != "" {
		if cfg.APIKeys, err = auth.ReadAPIKeysFile(a.apiKeysFile); err != nil {
			return nil, fmt.Errorf("--auth-api-keys-file: %w", err)
		}
	}
	au, err := auth.New(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("--auth-*: %w", err)
	}
	return au, nil
}

// token mints an HS256 JWT for development: agentstream token
// --secret-file F --sub alice [--admin] [--ttl 1h] [--threads 'p*,q'].
func token(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("agentstream token", flag.ContinueOnError)
	fs.SetOutput(stderr)
	secretFile := fs.String("secret-file", "", "the HS256 secret file the server reads (--auth-hs256-secret-file)")
	var o auth.TokenOptions
	fs.StringVar(&o.Subject, "sub", "", "the principal (sub)")
	fs.BoolVar(&o.Admin, "admin", false, "make it an admin (role: admin)")
	fs.BoolVar(&o.Producer, "producer", false, "let it publish events into threads (role: producer)")
	fs.DurationVar(&o.TTL, "ttl", time.Hour, "how long it is valid (0: no exp)")
	threads := fs.String("threads", "", "comma-separated thread-id patterns (* glob) it may use besides its own threads")
	assistants := fs.String("assistants", "", "with --producer: comma-separated assistant-id patterns (* glob) it may serve as a remote worker (none: only ids no other principal serves)")
	store := fs.String("store", "", "comma-separated namespaces of the long-term store it shares (labels joined by '.', * one label); its other items are its own")
	fs.StringVar(&o.Audience, "aud", "", "the audience (aud)")
	fs.StringVar(&o.Issuer, "iss", "", "the issuer (iss)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *secretFile == "" || o.Subject == "" {
		fmt.Fprintln(stderr, "agentstream token: --secret-file and --sub are needed")
		return 2
	}
	secret, err := auth.ReadSecretFile(*secretFile)
	if err != nil {
		fmt.Fprintln(stderr, "agentstream token:", err)
		return 1
	}
	o.Threads = splitList(*threads)
	o.Assistants = splitList(*assistants)
	o.Store = splitList(*store)
	t, err := auth.Mint(secret, o)
	if err != nil {
		fmt.Fprintln(stderr, "agentstream token:", err)
		return 1
	}
	fmt.Fprintln(stdout, t)
	return 0
}
