package live

import (
	"bufio"
	"encoding/json"
	"net"
	"time"
)

// DefaultDaemonSocket is the daemon's control socket.
const DefaultDaemonSocket = "/run/predictio/daemon.sock"

// ClaimRequest is the control message by which `predictio run` tells a
// running daemon that the launches of process PID's descendants are its
// own: the daemon neither learns nor prefetches them while the connection
// that sent it stays open.
type ClaimRequest struct {
	Op  string `json:"op"` // "claim"
	PID int    `json:"pid"`
}

// ClaimLaunches tells the daemon at socket (when one runs) that run
// process pid owns the launches below it, and returns the function that
// ends the claim. Without a daemon it does nothing: the claim costs a
// failed connect.
func ClaimLaunches(socket string, pid int) (release func()) {
	nop := func() {}
	c, err := net.DialTimeout("unix", socket, 100*time.Millisecond)
	if err != nil {
		return nop
	}
	_ = c.SetDeadline(time.Now().Add(time.Second))
	b, _ := json.Marshal(ClaimRequest{Op: "claim", PID: pid})
	if _, err := c.Write(append(b, '\n')); err != nil {
		c.Close()
		return nop
	}
	// Wait for the daemon's answer: from then on it skips the launches.
	if ans, err := bufio.NewReader(c).ReadString('\n'); err != nil || ans != "ok\n" {
		c.Close()
		return nop
	}
	_ = c.SetDeadline(time.Time{})
	return func() { c.Close() }
}
