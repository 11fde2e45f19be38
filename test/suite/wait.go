package suite

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// PollInterval is how often Poll and Eventually ask.
const PollInterval = 50 * time.Millisecond

// Poll asks cond every PollInterval, at once first, until it holds or
// timeout passes; then the error says what was awaited and cond's last word
// on why not.
func Poll(what string, timeout time.Duration, cond func() (bool, string)) error {
	last := ""
	err := wait.PollUntilContextTimeout(context.Background(), PollInterval, timeout, true,
		func(context.Context) (bool, error) {
			ok, why := cond()
			last = why
			return ok, nil
		})
	if err != nil {
		return fmt.Errorf("after %v still waiting for %s; last: %s", timeout, what, last)
	}
	return nil
}

// Eventually is Poll failing t.
func Eventually(t testing.TB, what string, timeout time.Duration, cond func() (bool, string)) {
	t.Helper()
	if err := Poll(what, timeout, cond); err != nil {
		t.Fatal(err)
	}
}

// Consistently fails t if cond is false at any look for d: at once, then
// every interval (a look may cost a request, so not every PollInterval).
func Consistently(t testing.TB, what string, d, interval time.Duration, cond func() (bool, string)) {
	t.Helper()
	for end := time.Now().Add(d); ; time.Sleep(interval) { // the pace of the looks
		if ok, why := cond(); !ok {
			t.Fatalf("%s: no longer so: %s", what, why)
		}
		if time.Now().After(end) {
			return
		}
	}
}
