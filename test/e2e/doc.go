// Package e2e holds cri-compose's end-to-end tests: they build
// bin/cri-compose, run it against the machine's Docker Engine and drive it
// with crictl only, the way kubelet's operators would, then check with Docker
// Compose itself (v2 as a CLI plugin built from test/tools, and Debian's v1
// when it is installed) that every pod is a Compose project.
//
// TestMain prepares, once per run:
//   - bin/cri-compose, built from the repository into a temp dir (with -race
//     when the tests run with -race, and a data race it reports fails the
//     test that ran it);
//   - crictl (the main module's tool) and docker compose v2 (the tool of the
//     separate module test/tools), each built once into
//     os.UserCacheDir()/cri-compose/tools/<name>-<version> and reused by every
//     later run; compose is installed for the tests only, as a CLI plugin in
//     a temp DOCKER_CONFIG;
//   - the busybox image of test/images, loaded into the engine and pushed to
//     a registry (go-containerregistry's, in process on 127.0.0.1) that the
//     tests pull from, directly and through a --registry-mirror.
//
// The tests: TestPodLife (pulls, direct and through a mirror; a pod's whole
// life; Compose v2 and v1 see it; cri-compose restarted under it by SIGTERM
// and SIGKILL with its CRI log file intact; teardown leaves nothing),
// TestExitCode, and TestTwoRuntimesOneEngine (a second cri-compose on the
// engine leaves the first one's pods alone).
//
// Without an engine the tests skip (fail when CI is set). Everything a run
// makes — processes, pods, containers, networks, images, temp dirs — is
// named after the run and removed at its end, failed or not; what a run that
// was killed left behind is removed by the next run (sweepStaleRuns).
//
// Run them with `make test-e2e` or `go test -race -count=1 ./test/e2e/`; add
// -v to see the transcript of crictl commands that TestPodLife logs.
package e2e
