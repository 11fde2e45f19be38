package sandbox

import (
	"bufio"
	"bytes"
	"fmt"
	"slices"
	"strconv"
	"strings"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ImageUsers are an image's /etc/passwd and /etc/group (nil: the image
// has none), read by the caller.
type ImageUsers struct {
	Passwd, Group []byte
}

// Identity is the user a container's first process runs as: the uid, the
// primary gid, and the supplementary groups (sorted, the primary gid
// among them). ContainerStatus reports it (ContainerUser).
type Identity struct {
	UID, GID int64
	Groups   []int64
}

// String is the Identity as the LabelUser label keeps it: "uid:gid:g1,g2".
func (id Identity) String() string {
	gs := make([]string, len(id.Groups))
	for i, g := range id.Groups {
		gs[i] = strconv.FormatInt(g, 10)
	}
	return strconv.FormatInt(id.UID, 10) + ":" + strconv.FormatInt(id.GID, 10) + ":" + strings.Join(gs, ",")
}

// ParseIdentity reads a LabelUser label back.
func ParseIdentity(s string) (Identity, bool) {
	f := strings.SplitN(s, ":", 3)
	if len(f) != 3 {
		return Identity{}, false
	}
	var id Identity
	var err1, err2 error
	id.UID, err1 = strconv.ParseInt(f[0], 10, 64)
	id.GID, err2 = strconv.ParseInt(f[1], 10, 64)
	if err1 != nil || err2 != nil {
		return Identity{}, false
	}
	for _, g := range strings.Split(f[2], ",") {
		if g == "" {
			continue
		}
		n, err := strconv.ParseInt(g, 10, 64)
		if err != nil {
			return Identity{}, false
		}
		id.Groups = append(id.Groups, n)
	}
	return id, true
}

// ResolveUser works out who a container runs as, as containerd's CRI
// plugin does, from its security context, the image's configured user
// (imageUser, "name", "uid", "name:group" or "uid:gid") and the image's
// user and group files:
//
//   - the user: run_as_user, else run_as_username, else the image's user,
//     else root; a name must be in the image's /etc/passwd;
//   - the primary group: run_as_group, else the group the image's user
//     names (when neither run_as_user nor run_as_username is set), else
//     the user's group in /etc/passwd, else 0;
//   - the supplementary groups: the primary one, with the
//     SupplementalGroupsPolicy Merge (the default) every group of
//     /etc/group that lists the user's name, and the requested
//     supplemental_groups. With Strict, the image's groups are left out.
//
// The engine is then given the numeric uid:gid and every group by number:
// given a bare user, it would add the image's groups itself (libcontainer),
// but never the primary group, and with Strict it must add none.
func ResolveUser(sc *runtime.LinuxContainerSecurityContext, imageUser string, files ImageUsers) (Identity, error) {
	userPart, groupPart := "0", ""
	switch {
	case sc.GetRunAsUser() != nil:
		userPart = strconv.FormatInt(sc.GetRunAsUser().GetValue(), 10)
	case sc.GetRunAsUsername() != "":
		userPart = sc.GetRunAsUsername()
	case imageUser != "":
		userPart, groupPart, _ = strings.Cut(imageUser, ":")
	}
	if sc.GetRunAsGroup() != nil {
		if sc.GetRunAsUser() == nil && sc.GetRunAsUsername() == "" {
			return Identity{}, invalid("run_as_group needs run_as_user or run_as_username")
		}
		groupPart = strconv.FormatInt(sc.GetRunAsGroup().GetValue(), 10)
	}
	users := parsePasswd(files.Passwd)
	groups := parseGroup(files.Group)

	var id Identity
	name := ""
	if uid, err := strconv.ParseInt(userPart, 10, 64); err == nil {
		if uid < 0 {
			return Identity{}, invalid("user id %d is negative", uid)
		}
		id.UID = uid
		if u, ok := findUser(users, func(u passwdEntry) bool { return u.uid == uid }); ok {
			name, id.GID = u.name, u.gid
		}
	} else {
		u, ok := findUser(users, func(u passwdEntry) bool { return u.name == userPart })
		if !ok {
			return Identity{}, invalid("user %q is not in the image's /etc/passwd", userPart)
		}
		name, id.UID, id.GID = u.name, u.uid, u.gid
	}
	if groupPart != "" {
		if gid, err := strconv.ParseInt(groupPart, 10, 64); err == nil {
			if gid < 0 {
				return Identity{}, invalid("group id %d is negative", gid)
			}
			id.GID = gid
		} else {
			i := slices.IndexFunc(groups, func(g groupEntry) bool { return g.name == groupPart })
			if i < 0 {
				return Identity{}, invalid("group %q is not in the image's /etc/group", groupPart)
			}
			id.GID = groups[i].gid
		}
	}
	id.Groups = []int64{id.GID}
	if sc.GetSupplementalGroupsPolicy() != runtime.SupplementalGroupsPolicy_Strict && name != "" {
		for _, g := range groups {
			if g.name != name && slices.Contains(g.members, name) {
				id.Groups = append(id.Groups, g.gid)
			}
		}
	}
	id.Groups = append(id.Groups, sc.GetSupplementalGroups()...)
	slices.Sort(id.Groups)
	id.Groups = slices.Compact(id.Groups)
	return id, nil
}

type passwdEntry struct {
	name     string
	uid, gid int64
}

type groupEntry struct {
	name    string
	gid     int64
	members []string
}

func findUser(users []passwdEntry, match func(passwdEntry) bool) (passwdEntry, bool) {
	for _, u := range users { // the first match wins, as in libc
		if match(u) {
			return u, true
		}
	}
	return passwdEntry{}, false
}

// parsePasswd reads name:password:uid:gid:gecos:home:shell lines.
func parsePasswd(b []byte) []passwdEntry {
	var out []passwdEntry
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Split(strings.TrimSpace(sc.Text()), ":")
		if len(f) < 4 || strings.HasPrefix(f[0], "#") {
			continue
		}
		uid, err1 := strconv.ParseInt(f[2], 10, 64)
		gid, err2 := strconv.ParseInt(f[3], 10, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		out = append(out, passwdEntry{name: f[0], uid: uid, gid: gid})
	}
	return out
}

// parseGroup reads name:password:gid:member,member lines.
func parseGroup(b []byte) []groupEntry {
	var out []groupEntry
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Split(strings.TrimSpace(sc.Text()), ":")
		if len(f) < 3 || strings.HasPrefix(f[0], "#") {
			continue
		}
		gid, err := strconv.ParseInt(f[2], 10, 64)
		if err != nil {
			continue
		}
		g := groupEntry{name: f[0], gid: gid}
		if len(f) > 3 && f[3] != "" {
			g.members = strings.Split(f[3], ",")
		}
		out = append(out, g)
	}
	return out
}

// userFlags sets the engine's user and groups from a resolved Identity.
func (id Identity) engineUser() (user string, groupAdd []string) {
	user = fmt.Sprintf("%d:%d", id.UID, id.GID)
	for _, g := range id.Groups {
		groupAdd = append(groupAdd, strconv.FormatInt(g, 10))
	}
	return user, groupAdd
}
