package vk

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	clocktesting "k8s.io/utils/clock/testing"
)

// debugPod is testPod with ephemeral container "dbg" targeting "a".
func debugPod() *v1.Pod {
	pod := testPod()
	pod.Spec.EphemeralContainers = []v1.EphemeralContainer{{
		EphemeralContainerCommon: v1.EphemeralContainerCommon{Name: "dbg", Image: "busybox", Stdin: true, TTY: true,
			TerminationMessagePath: "/dev/termination-log"},
		TargetContainerName: "a",
	}}
	return pod
}

func inSandbox(c *criContainer, sb string) *criContainer { c.sandboxID = sb; return c }

// TestEphemeralActions: an ephemeral container starts once the sandbox
// runs, before the init containers, joined to its target's container, and
// never again whatever became of it.
func TestEphemeralActions(t *testing.T) {
	noTarget := func(pod *v1.Pod) { pod.Spec.EphemeralContainers[0].TargetContainerName = "" }
	cases := []struct {
		name       string
		edit       func(*v1.Pod)
		sandbox    bool
		state      podState
		containers []*criContainer
		want       []string
	}{
		{name: "joins its running target", sandbox: true,
			containers: []*criContainer{exited("init", "sb1", 0, 0), running("a", "sb1", 0), running("b", "sb1", 0)},
			want:       []string{"syncContainers", "start dbg attempt=0 target=a-0"}},
		{name: "target restarted: its newest container", sandbox: true,
			containers: []*criContainer{exited("init", "sb1", 0, 0), running("a", "sb1", 1), exited("a", "sb1", 0, 1), running("b", "sb1", 0)},
			want:       []string{"syncContainers", "start dbg attempt=0 target=a-1"}},
		{name: "target not made yet: waits", sandbox: true, containers: []*criContainer{running("init", "sb1", 0)},
			want: []string{"syncContainers", "noTarget dbg msg=unable to find target container a"}},
		{name: "no target: starts before the init containers", edit: noTarget, sandbox: true,
			containers: []*criContainer{running("init", "sb1", 0)},
			want:       []string{"syncContainers", "start dbg attempt=0"}},
		{name: "exited: not restarted, restartPolicy Always", sandbox: true,
			containers: []*criContainer{exited("init", "sb1", 0, 0), running("a", "sb1", 0), running("b", "sb1", 0), exited("dbg", "sb1", 0, 1)},
			want:       []string{"syncContainers"}},
		{name: "start failed, left created: not started again", sandbox: true,
			containers: []*criContainer{exited("init", "sb1", 0, 0), running("a", "sb1", 0), running("b", "sb1", 0),
				func() *criContainer {
					c := running("dbg", "sb1", 0)
					c.state = runtimeapi.ContainerState_CONTAINER_CREATED
					return c
				}()},
			want: []string{"syncContainers"}},
		{name: "ran in the sandbox before: not run in the new one", sandbox: true,
			containers: []*criContainer{exited("init", "sb1", 0, 0), running("a", "sb1", 0), running("b", "sb1", 0),
				inSandbox(exited("dbg", "sb0", 0, 137), "sb0")},
			want: []string{"syncContainers"}},
		{name: "no sandbox: the sandbox first", sandbox: false, want: []string{"createSandbox attempt=0 kill=[]"}},
		{name: "pod deleted: stopped with the rest", sandbox: true, state: podDeleting,
			containers: []*criContainer{exited("init", "sb1", 0, 0), running("a", "sb1", 0), running("dbg", "sb1", 0)},
			want:       []string{"killPod", "stop a dbg"}},
		{name: "pod finished: stopped", sandbox: true, state: podTerminal,
			containers: []*criContainer{exited("init", "sb1", 0, 0), exited("a", "sb1", 0, 0), running("dbg", "sb1", 0)},
			want:       []string{"stop dbg"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pod := debugPod()
			if tc.edit != nil {
				tc.edit(pod)
			}
			obs := &observation{containers: map[string][]*criContainer{}}
			if tc.sandbox {
				obs.sandboxes = []*runtimeapi.PodSandbox{{Id: "sb1", Metadata: &runtimeapi.PodSandboxMetadata{Attempt: 1}, State: runtimeapi.PodSandboxState_SANDBOX_READY}}
				obs.sandbox = &runtimeapi.PodSandboxStatus{Id: "sb1", State: runtimeapi.PodSandboxState_SANDBOX_READY}
			}
			for _, c := range tc.containers {
				obs.containers[c.name] = append(obs.containers[c.name], c)
			}
			b := newBackoff(clocktesting.NewFakeClock(t0), backoffInitial, backoffMax)
			in := planInput{pod: pod, obs: obs, state: tc.state, probes: fakeProbes{}, backoff: b}
			if got := describe(computePodActions(in)); !slices.Equal(got, tc.want) {
				t.Errorf("plan:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(tc.want, "\n  "))
			}
		})
	}
}

// TestEphemeralStatus: the ephemeral container's status says its state,
// container, image and image id; it is never ready, and the pod's phase
// and readiness are those of its app containers whatever it does.
func TestEphemeralStatus(t *testing.T) {
	sb := &sandboxInfo{id: "sb1", ready: true, ips: []string{"10.1.0.5"}}
	apps := []*criContainer{exited("init", "sb1", 0, 0), running("a", "sb1", 0), running("b", "sb1", 0)}
	created := running("dbg", "sb1", 0)
	created.state = runtimeapi.ContainerState_CONTAINER_CREATED
	cases := []struct {
		name       string
		dbg        *criContainer
		waiting    *waiting
		terminated bool
		want       string // the state, as ephemeralState renders it
		wantID     bool
	}{
		{name: "not started yet", want: "waiting:ContainerCreating"},
		{name: "waits for its target", waiting: &waiting{reason: reasonCreateConfigError, message: "unable to find target container a"},
			want: "waiting:CreateContainerConfigError:unable to find target container a"},
		{name: "running", dbg: running("dbg", "sb1", 0), want: "running", wantID: true},
		{name: "start failed", dbg: created, waiting: &waiting{reason: reasonRunContainerError, message: "boom"},
			want: "waiting:RunContainerError:boom", wantID: true},
		{name: "exited with 1", dbg: exited("dbg", "sb1", 0, 1), want: "terminated:1:Error", wantID: true},
		{name: "exited in the sandbox before", dbg: exited("dbg", "sb0", 0, 0), want: "terminated:0:Completed", wantID: true},
		{name: "pod deleted while it ran", dbg: running("dbg", "sb1", 0), terminated: true,
			want: "terminated:137:ContainerStatusUnknown", wantID: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			containers := map[string][]*criContainer{}
			for _, c := range apps {
				containers[c.name] = []*criContainer{c}
			}
			waitingFor := map[string]*waiting{}
			if tc.dbg != nil {
				containers["dbg"] = []*criContainer{tc.dbg}
			}
			if tc.waiting != nil {
				waitingFor["dbg"] = tc.waiting
			}
			st := computeStatus(statusInput{pod: debugPod(), runtimeName: "cri-compose", sandbox: sb,
				containers: containers, waiting: waitingFor, terminated: tc.terminated, startTime: t0, now: t0})
			if len(st.EphemeralContainerStatuses) != 1 {
				t.Fatalf("ephemeral container statuses: %+v, want one", st.EphemeralContainerStatuses)
			}
			cs := st.EphemeralContainerStatuses[0]
			if got := ephemeralState(cs); cs.Name != "dbg" || cs.Image != "busybox" || got != tc.want {
				t.Errorf("status %s %s %s, want dbg busybox %s", cs.Name, cs.Image, got, tc.want)
			}
			if cs.Ready {
				t.Error("an ephemeral container reads ready")
			}
			if wantID := "cri-compose://dbg-0"; tc.wantID && (cs.ContainerID != wantID || cs.ImageID != "sha256:img") {
				t.Errorf("containerID %q imageID %q, want %q sha256:img", cs.ContainerID, cs.ImageID, wantID)
			}
			if tc.terminated {
				return
			}
			if st.Phase != v1.PodRunning || condition(st, v1.PodReady) != v1.ConditionTrue {
				t.Errorf("pod %s Ready=%s, want Running and Ready whatever its ephemeral container does", st.Phase, condition(st, v1.PodReady))
			}
			for _, l := range [][]v1.ContainerStatus{st.InitContainerStatuses, st.ContainerStatuses} {
				for _, s := range l {
					if s.Name == "dbg" {
						t.Errorf("the ephemeral container is among the pod's other containers: %+v", s)
					}
				}
			}
		})
	}
}

func ephemeralState(cs v1.ContainerStatus) string {
	switch s := cs.State; {
	case s.Running != nil:
		return "running"
	case s.Waiting != nil && s.Waiting.Message != "":
		return "waiting:" + s.Waiting.Reason + ":" + s.Waiting.Message
	case s.Waiting != nil:
		return "waiting:" + s.Waiting.Reason
	case s.Terminated != nil:
		return fmt.Sprintf("terminated:%d:%s", s.Terminated.ExitCode, s.Terminated.Reason)
	}
	return ""
}

// TestEphemeralTargetNamespace: the ephemeral container joins its target's
// PID namespace unless the pod already shares one (its own or the node's),
// as kubelet decides.
func TestEphemeralTargetNamespace(t *testing.T) {
	yes := true
	cases := []struct {
		name       string
		edit       func(*v1.Pod)
		target     string
		want       runtimeapi.NamespaceMode
		wantTarget string
	}{
		{name: "target", target: "ctr-a", want: runtimeapi.NamespaceMode_TARGET, wantTarget: "ctr-a"},
		{name: "no target", want: runtimeapi.NamespaceMode_CONTAINER},
		{name: "shareProcessNamespace", edit: func(p *v1.Pod) { p.Spec.ShareProcessNamespace = &yes }, target: "ctr-a",
			want: runtimeapi.NamespaceMode_POD},
		{name: "hostPID", edit: func(p *v1.Pod) { p.Spec.HostPID = true }, target: "ctr-a", want: runtimeapi.NamespaceMode_NODE},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pod := debugPod()
			if tc.edit != nil {
				tc.edit(pod)
			}
			cfg, err := makeContainerConfig(pod, startSpec{c: ephemeralSpec(pod, "dbg"), imageRef: "sha256:img", pidTarget: tc.target})
			if err != nil {
				t.Fatal(err)
			}
			ns := cfg.GetLinux().GetSecurityContext().GetNamespaceOptions()
			if ns.GetPid() != tc.want || ns.GetTargetId() != tc.wantTarget {
				t.Errorf("pid %s target %q, want %s %q", ns.GetPid(), ns.GetTargetId(), tc.want, tc.wantTarget)
			}
			if !cfg.Stdin || !cfg.Tty {
				t.Errorf("stdin %v tty %v, want both as the spec asks", cfg.Stdin, cfg.Tty)
			}
		})
	}
}
