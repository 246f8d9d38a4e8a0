package store

import (
	"context"
	"encoding/json"
	"time"
)

// ToolCall is one tool call for the activity log. Arguments and results are
// not part of it: Detail carries only what the caller chose to keep.
type ToolCall struct {
	At        time.Time
	UserID    int64 // 0: unknown
	TokenID   int64 // 0: not through a token
	Server    string
	Tool      string
	Variant   string
	Outcome   string
	RequestID string
	Duration  time.Duration
	Detail    map[string]any
}

// RecordToolCalls writes a batch of tool calls in one statement. A user or
// token deleted since the call is recorded as NULL rather than failing the
// batch.
func (s *Store) RecordToolCalls(ctx context.Context, calls []ToolCall) error {
	if len(calls) == 0 {
		return nil
	}
	n := len(calls)
	at := make([]time.Time, n)
	users := make([]int64, n)
	tokens := make([]int64, n)
	servers := make([]string, n)
	tools := make([]string, n)
	variants := make([]string, n)
	outcomes := make([]string, n)
	reqIDs := make([]string, n)
	durations := make([]int32, n)
	details := make([]string, n)
	for i, c := range calls {
		at[i], users[i], tokens[i] = c.At, c.UserID, c.TokenID
		servers[i], tools[i], variants[i], outcomes[i], reqIDs[i] = c.Server, c.Tool, c.Variant, c.Outcome, c.RequestID
		durations[i] = int32(min(c.Duration.Milliseconds(), 1<<31-1))
		details[i] = "{}"
		if len(c.Detail) > 0 {
			if b, err := json.Marshal(c.Detail); err == nil {
				details[i] = string(b)
			}
		}
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO activity (at, user_id, token_id, action, target, outcome, request_id,
			server, tool, variant, duration_ms, detail)
		SELECT c.at, u.id, t.id, 'tool.call', 'tool/' || c.server || ':' || c.tool, c.outcome, c.request_id,
			c.server, c.tool, c.variant, c.duration_ms, c.detail::jsonb
		FROM unnest($1::timestamptz[], $2::bigint[], $3::bigint[], $4::text[], $5::text[], $6::text[], $7::text[],
			$8::text[], $9::int[], $10::text[])
			AS c(at, user_id, token_id, server, tool, variant, outcome, request_id, duration_ms, detail)
		LEFT JOIN users u ON u.id = c.user_id
		LEFT JOIN tokens t ON t.id = c.token_id`,
		at, users, tokens, servers, tools, variants, outcomes, reqIDs, durations, details)
	return err
}
