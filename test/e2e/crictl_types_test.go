package e2e

import (
	"strings"
	"testing"
)

// What crictl -o json prints, as far as the tests read it.

type imageList struct {
	Images []struct {
		ID       string   `json:"id"`
		RepoTags []string `json:"repoTags"`
	} `json:"images"`
}

func (l imageList) has(ref string) bool {
	for _, img := range l.Images {
		for _, tag := range img.RepoTags {
			if tag == ref {
				return true
			}
		}
	}
	return false
}

func (l imageList) tags() []string {
	var all []string
	for _, img := range l.Images {
		all = append(all, img.RepoTags...)
	}
	return all
}

type podList struct {
	Items []struct {
		ID       string `json:"id"`
		State    string `json:"state"`
		Metadata struct {
			Name string `json:"name"`
		} `json:"metadata"`
	} `json:"items"`
}

type containerList struct {
	Containers []struct {
		ID           string `json:"id"`
		PodSandboxID string `json:"podSandboxId"`
		State        string `json:"state"`
		Metadata     struct {
			Name string `json:"name"`
		} `json:"metadata"`
	} `json:"containers"`
}

type containerInspect struct {
	Status struct {
		ID       string `json:"id"`
		State    string `json:"state"`
		ExitCode int    `json:"exitCode"`
		Reason   string `json:"reason"`
		LogPath  string `json:"logPath"`
	} `json:"status"`
	Info struct {
		Project string `json:"project"`
		Service string `json:"service"`
	} `json:"info"`
}

type podInspect struct {
	Status struct {
		ID      string `json:"id"`
		State   string `json:"state"`
		Network struct {
			IP string `json:"ip"`
		} `json:"network"`
	} `json:"status"`
	Info struct {
		Project     string `json:"project"`
		ComposeFile string `json:"composeFile"`
	} `json:"info"`
}

// snapshot is the id, name and state of every pod of the daemon's namespace
// and every container of pod, as crictl lists them, for comparing across
// restarts.
func (d *daemon) snapshot(t *testing.T, pod string) string {
	t.Helper()
	var pods podList
	d.crictlJSON(&pods, "pods", "--namespace", d.namespace)
	var ctrs containerList
	d.crictlJSON(&ctrs, "ps", "-a", "--pod", pod)
	var b strings.Builder
	for _, p := range pods.Items {
		b.WriteString("pod " + p.ID[:13] + " " + p.Metadata.Name + " " + p.State + "\n")
	}
	for _, c := range ctrs.Containers {
		b.WriteString("container " + c.ID[:13] + " " + c.Metadata.Name + " pod " + c.PodSandboxID[:13] + " " + c.State + "\n")
	}
	return b.String()
}
