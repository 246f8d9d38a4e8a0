-- Upstream OAuth (MCP authorization) for remote servers: each server's
-- client configuration, the authorization flows in progress and the tokens.
-- Every secret column holds a sealed value whose AAD names its table, row and
-- column (see store/oauth.go); '' means "none".

CREATE TABLE server_oauth (
    server_id     bigint PRIMARY KEY REFERENCES servers (id) ON DELETE CASCADE,
    -- per-user: each user authorizes and calls with their own token;
    -- shared: one token, a service account, for every caller of the server.
    mode          text NOT NULL DEFAULT 'per-user' CHECK (mode IN ('per-user', 'shared')),
    -- A pre-registered client; empty means dynamic client registration.
    client_id     text NOT NULL DEFAULT '',
    client_secret text NOT NULL DEFAULT '',
    scopes        text[] NOT NULL DEFAULT '{}',
    -- Sealed JSON: the RFC 7591 registration (client id and secret) and the
    -- discovered resource and authorization server. Discovery is sealed too,
    -- since the resource is the server URL, which may carry credentials.
    registration  text NOT NULL DEFAULT '',
    discovery     text NOT NULL DEFAULT '',
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now()
);

-- A flow lives from /oauth/start to /oauth/callback: single use (the callback
-- deletes it) and short-lived. Only a hash of the state is kept, so a
-- database reader cannot finish someone else's flow.
CREATE TABLE oauth_flows (
    state_hash   bytea PRIMARY KEY CHECK (length(state_hash) = 32),
    server_id    bigint NOT NULL REFERENCES servers (id) ON DELETE CASCADE,
    user_id      bigint NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    -- The token goes to the server's shared slot rather than to user_id.
    shared       boolean NOT NULL,
    -- SHA-256 of the value of a cookie set on the browser that started the
    -- flow: the callback must come back from that browser (or from a session
    -- of the same user), so a link to someone else's flow is useless.
    binding_hash bytea NOT NULL CHECK (length(binding_hash) = 32),
    -- SHA-256 of the server URL the flow was started for (see oauth_tokens).
    url_hash     bytea NOT NULL CHECK (length(url_hash) = 32),
    verifier     text NOT NULL,
    redirect_uri text NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL
);
CREATE INDEX oauth_flows_expires_at ON oauth_flows (expires_at);

CREATE TABLE oauth_tokens (
    server_id     bigint NOT NULL REFERENCES servers (id) ON DELETE CASCADE,
    -- NULL: the server's shared token.
    user_id       bigint REFERENCES users (id) ON DELETE CASCADE,
    -- One row per (server, user) with NULL counted as one value, without
    -- relying on NULLS NOT DISTINCT.
    user_key      bigint GENERATED ALWAYS AS (coalesce(user_id, 0)) STORED,
    access_token  text NOT NULL,
    refresh_token text NOT NULL DEFAULT '',
    token_type    text NOT NULL DEFAULT 'Bearer',
    scope         text NOT NULL DEFAULT '',
    expiry        timestamptz,
    status        text NOT NULL DEFAULT 'authorized' CHECK (status IN ('authorized', 'expired', 'error')),
    last_error    text NOT NULL DEFAULT '',
    -- SHA-256 of the server URL the token was issued for: once the URL
    -- changes, the token is not sent (it would go to another host).
    url_hash      bytea NOT NULL CHECK (length(url_hash) = 32),
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (server_id, user_key)
);
CREATE INDEX oauth_tokens_user_id ON oauth_tokens (user_id);
