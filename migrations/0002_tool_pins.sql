-- Approved tools: one SHA-256 pin per tool of a server, written when the
-- server is approved. A tool whose live pin differs is blocked until the
-- server is approved again; a tool without a pin is pending.

CREATE TABLE tool_pins (
    server_id   bigint NOT NULL REFERENCES servers (id) ON DELETE CASCADE,
    tool        text NOT NULL,
    pin         text NOT NULL CHECK (pin ~ '^[0-9a-f]{64}$'),
    approved_at timestamptz NOT NULL DEFAULT now(),
    approved_by bigint REFERENCES users (id) ON DELETE SET NULL,
    PRIMARY KEY (server_id, tool)
);
