// Package upstream keeps the gateway's MCP client sessions to its upstream
// servers alive: it starts stdio children (through a Launcher, one per
// isolation mode) or dials remote servers over Streamable HTTP or SSE,
// follows their tool lists, restarts them with backoff when they die, and
// stops lazily started personal servers when they sit idle.
//
// It knows nothing of the database or HTTP API: the core maps stored server
// rows to Desired values and hands them to a Supervisor.
package upstream
