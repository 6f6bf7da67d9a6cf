-- Pulse schema, version 2: bearer tokens of the HTTP API and dashboard (pgpulse.web).
-- A token is shown once, when created; only its SHA-256 is stored. Tokens are 256-bit random
-- strings, so a fast hash is enough (nothing to brute-force); the prefix lets people tell tokens
-- apart in `pgpulse token list` without storing the secret. A tenant token sees only its tenant;
-- an admin token sees every tenant. Revocation is a timestamp, checked on every request.

CREATE TABLE pgpulse_api_tokens (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    token_sha256  bytea NOT NULL UNIQUE CHECK (length(token_sha256) = 32),
    prefix        text NOT NULL,
    tenant        text,
    admin         boolean NOT NULL DEFAULT false,
    label         text NOT NULL DEFAULT '',
    created_at    timestamptz NOT NULL DEFAULT now(),
    last_used_at  timestamptz,
    revoked_at    timestamptz,
    CHECK (admin OR tenant IS NOT NULL)
);
