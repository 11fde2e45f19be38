// Command nnp prints the effective user ID it runs with, as
// registry.k8s.io/e2e-test-images/nonewprivs does. The critest image installs
// it setuid root: critest's NoNewPrivs specs run it as uid 1000 and expect
// "Effective uid: 0" when privilege escalation is allowed and
// "Effective uid: 1000" when no_new_privs is set.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Printf("Effective uid: %d\n", os.Geteuid())
}
