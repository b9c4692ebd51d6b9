package source

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Cred is a process's filesystem credentials: what the kernel checks an
// open by that process against.
type Cred struct {
	UID, GID uint32   // fsuid and fsgid
	Groups   []uint32 // supplementary groups
}

// ProcCred reads the filesystem uid, gid and supplementary groups of
// process pid from /proc/PID/status.
func ProcCred(pid int) (Cred, error) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return Cred{}, fmt.Errorf("read credentials of pid %d: %w", pid, err)
	}
	defer f.Close()
	var c Cred
	var have int
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "Uid:"), strings.HasPrefix(line, "Gid:"):
			// real, effective, saved, filesystem
			fs := strings.Fields(line[4:])
			if len(fs) != 4 {
				return Cred{}, fmt.Errorf("read credentials of pid %d: malformed %q", pid, line)
			}
			v, err := strconv.ParseUint(fs[3], 10, 32)
			if err != nil {
				return Cred{}, fmt.Errorf("read credentials of pid %d: malformed %q", pid, line)
			}
			if line[0] == 'U' {
				c.UID = uint32(v)
			} else {
				c.GID = uint32(v)
			}
			have++
		case strings.HasPrefix(line, "Groups:"):
			for _, g := range strings.Fields(line[7:]) {
				if v, err := strconv.ParseUint(g, 10, 32); err == nil {
					c.Groups = append(c.Groups, uint32(v))
				}
			}
		}
	}
	if have != 2 {
		return Cred{}, fmt.Errorf("read credentials of pid %d: no Uid and Gid lines", pid)
	}
	return c, nil
}

// AccessChecker answers whether a process may read a path with the
// kernel's own permission check as that process: faccessat2(R_OK,
// AT_EACCESS) on a thread whose fsuid, fsgid and supplementary groups are
// the process's, the check the hint server makes for each hint's sender
// (directory search permission, ACLs, LSM checks, no CAP_DAC_OVERRIDE).
// Its methods are safe for concurrent use; checks run one at a time on a
// thread of their own. Needs CAP_SETUID and CAP_SETGID, and Linux 5.8.
type AccessChecker struct {
	c *accessChecker
}

// NewAccessChecker starts the checker's thread. It fails when this
// process cannot switch a thread's credentials (no CAP_SETUID and
// CAP_SETGID) or the kernel has no faccessat2.
func NewAccessChecker() (*AccessChecker, error) {
	c, err := newAccessChecker()
	if err != nil {
		return nil, err
	}
	return &AccessChecker{c: c}, nil
}

// MayRead reports whether a process with credentials c may open path for
// reading. Root (fsuid 0) may read everything and is not checked. An error
// means the check could not be made.
func (a *AccessChecker) MayRead(c Cred, path string) (bool, error) {
	if c.UID == 0 {
		return true, nil
	}
	return a.c.check(c.UID, c.GID, c.Groups, path)
}

// Close stops the checker's thread.
func (a *AccessChecker) Close() { a.c.close() }
