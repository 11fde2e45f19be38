package cri

// TEST-ONLY failpoints (used by test/fault only).
//
// CRI_COMPOSE_FAILPOINT=<step>, read once at start, makes the process kill
// itself with SIGKILL the first time it reaches <step>: a crash (or a
// kill -9) at exactly that point of a request. test/fault restarts the
// binary after it and checks that the engine and the state dir hold exactly
// what they should once kubelet's retries are done. Unset, as it always is
// outside those tests, a failpoint is one comparison with "".

import (
	"os"
	"syscall"

	"k8s.io/klog/v2"
)

// FailpointEnv names the environment variable that arms a failpoint.
const FailpointEnv = "CRI_COMPOSE_FAILPOINT"

// The steps a failpoint can name, in request order.
const (
	FailRunBeforeInfraCreate   = "run-sandbox/before-infra-create"   // resolv.conf written, no container yet
	FailRunAfterInfraCreate    = "run-sandbox/after-infra-create"    // infra container created, no compose file
	FailRunAfterComposeWrite   = "run-sandbox/after-compose-write"   // compose file written, infra not started
	FailRunAfterStart          = "run-sandbox/after-start"           // infra running, no answer sent
	FailCreateAfterCreate      = "create-container/after-create"     // container created, compose file not updated
	FailStartAfterStart        = "start-container/after-start"       // container running, no log pump yet
	FailStopBetweenContainers  = "stop-sandbox/after-container-stop" // one container stopped, others maybe not
	FailStopBeforeInfraStop    = "stop-sandbox/before-infra-stop"    // containers stopped, infra running
	FailRemoveAfterContainers  = "remove-sandbox/after-containers"   // containers removed, infra not
	FailRemoveAfterInfraRemove = "remove-sandbox/after-infra-remove" // infra removed, project folder not
)

// FailpointSteps lists every step, for the tests that visit them all.
var FailpointSteps = []string{
	FailRunBeforeInfraCreate, FailRunAfterInfraCreate, FailRunAfterComposeWrite, FailRunAfterStart,
	FailCreateAfterCreate, FailStartAfterStart,
	FailStopBetweenContainers, FailStopBeforeInfraStop,
	FailRemoveAfterContainers, FailRemoveAfterInfraRemove,
}

var armedFailpoint = os.Getenv(FailpointEnv)

// failpoint kills the process when step is the armed one (test only).
func failpoint(step string) {
	if armedFailpoint == "" || armedFailpoint != step {
		return
	}
	klog.InfoS("Failpoint reached: killing the process with SIGKILL", "step", step)
	klog.Flush()
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // SIGKILL cannot be caught: nothing runs after it
}
