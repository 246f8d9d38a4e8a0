package sandbox_test

import (
	"context"
	"os"
	"os/exec"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/testbin"
	"github.com/mcpgate/mcpgate/sandbox"
)

var (
	medianMu sync.Mutex
	medians  = map[string]time.Duration{}
)

// BenchmarkSpawnToInitialize measures spawning mcpecho and completing MCP
// initialize with the go-sdk client: plainly (none), through the wrapper
// with the production policy where the wrapper is this test binary, a
// large binary like mcpgate (sandbox), and where it is a binary holding
// only the wrapper (sandbox-small). It reports the median (run it with
// -benchtime=20x or more) and, for the sandboxed cases, the ratio to none.
// Build without -race.
//
//	go test -run '^$' -bench SpawnToInitialize -benchtime 30x ./sandbox/
func BenchmarkSpawnToInitialize(b *testing.B) {
	need(b, os.Geteuid() == 0, "the sandbox case switches to uid %d and needs root", nobody)
	echo := testbin.Build(b, "internal/cmd/mcpecho")
	small := testbin.Build(b, "cmd/mcpgate-sandbox")
	w := newWorld(b)
	policy := w.policy(w.alpha, nobody)

	for _, mode := range []string{"none", "sandbox", "sandbox-small"} {
		b.Run(mode, func(b *testing.B) {
			var samples []time.Duration
			for b.Loop() {
				start := time.Now()
				var cmd *exec.Cmd
				switch mode {
				case "none":
					cmd = exec.Command(echo)
					cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
				case "sandbox":
					cmd = sandboxed(b, policy, echo)
				default:
					var err error
					if cmd, err = sandbox.Command(small, policy, []string{echo}); err != nil {
						b.Fatal(err)
					}
				}
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				s := connect(ctx, b, cmd)
				samples = append(samples, time.Since(start))
				b.StopTimer()
				s.close()
				cancel()
				b.StartTimer()
			}
			if len(samples) < 20 {
				return // a calibration round; only the real run reports
			}
			slices.Sort(samples)
			med := samples[len(samples)/2]
			b.ReportMetric(float64(med.Microseconds())/1000, "median-ms")
			medianMu.Lock()
			defer medianMu.Unlock()
			medians[mode] = med
			if none, ok := medians["none"]; ok && mode != "none" {
				b.ReportMetric(float64(med)/float64(none), "ratio-vs-none")
			}
		})
	}
}
