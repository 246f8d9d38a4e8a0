-- Users, tokens, servers, settings and the activity log: the control plane.

CREATE TABLE users (
    id          bigserial PRIMARY KEY,
    email       text NOT NULL,
    name        text NOT NULL DEFAULT '',
    role        text NOT NULL CHECK (role IN ('admin', 'member')),
    disabled    boolean NOT NULL DEFAULT false,
    -- The bootstrap admin behind MCPGATE_ADMIN_TOKEN; it cannot be deleted.
    builtin     boolean NOT NULL DEFAULT false,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX users_email_key ON users (lower(email));
CREATE UNIQUE INDEX users_one_builtin ON users (builtin) WHERE builtin;

CREATE TABLE tokens (
    id           bigserial PRIMARY KEY,
    user_id      bigint NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    name         text NOT NULL,
    kind         text NOT NULL CHECK (kind IN ('agent', 'personal')),
    -- Shown in listings so a person can tell tokens apart; the rest is a hash.
    prefix       text NOT NULL,
    last4        text NOT NULL,
    hash         bytea NOT NULL UNIQUE CHECK (length(hash) = 32),
    scopes       text[] NOT NULL,
    servers      text[] NOT NULL,
    expires_at   timestamptz NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    last_used_at timestamptz,
    revoked_at   timestamptz
);
CREATE INDEX tokens_user_id ON tokens (user_id);

CREATE TABLE servers (
    id           bigserial PRIMARY KEY,
    -- Unique across the gateway: tools are addressed as "server:tool".
    name         text NOT NULL UNIQUE CHECK (name ~ '^[a-z0-9][a-z0-9_-]*$' AND length(name) <= 64),
    protocol     text NOT NULL CHECK (protocol IN ('stdio', 'streamable-http', 'sse')),
    command      text NOT NULL DEFAULT '',
    args         jsonb NOT NULL DEFAULT '[]',
    -- env and headers map names to sealed values (see store/secrets.go).
    env          jsonb NOT NULL DEFAULT '{}',
    url          text NOT NULL DEFAULT '',
    headers      jsonb NOT NULL DEFAULT '{}',
    working_dir  text NOT NULL DEFAULT '',
    enabled      boolean NOT NULL DEFAULT true,
    quarantined  boolean NOT NULL DEFAULT true,
    shared       boolean NOT NULL DEFAULT false,
    owner_id     bigint NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    -- NULL means "inherit": the overrides are tri-state on the wire.
    isolation_enabled_override boolean,
    isolation_mode_override    text CHECK (isolation_mode_override IN ('docker', 'sandbox', 'none')),
    isolation_image            text,
    isolation_network_mode     text,
    isolation_memory_limit     text,
    isolation_cpu_limit        double precision,
    isolation_extra_args       jsonb,
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX servers_owner_id ON servers (owner_id);

CREATE TABLE settings (
    key         text PRIMARY KEY,
    value       jsonb NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE activity (
    id          bigserial PRIMARY KEY,
    at          timestamptz NOT NULL DEFAULT now(),
    user_id     bigint REFERENCES users (id) ON DELETE SET NULL,
    token_id    bigint REFERENCES tokens (id) ON DELETE SET NULL,
    action      text NOT NULL,
    target      text NOT NULL DEFAULT '',
    outcome     text NOT NULL DEFAULT 'ok',
    request_id  text NOT NULL DEFAULT '',
    server      text NOT NULL DEFAULT '',
    tool        text NOT NULL DEFAULT '',
    variant     text NOT NULL DEFAULT '',
    duration_ms integer,
    detail      jsonb NOT NULL DEFAULT '{}'
);
CREATE INDEX activity_at ON activity (at DESC);
CREATE INDEX activity_user_at ON activity (user_id, at DESC);
