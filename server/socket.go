package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

type socketKey struct{}

// fromSocket reports whether the request came over the admin socket, whose
// peers were checked to run as the gateway's own uid.
func fromSocket(ctx context.Context) bool {
	v, _ := ctx.Value(socketKey{}).(bool)
	return v
}

// ListenSocket opens the admin unix socket at path with mode 0600. A stale
// socket file from a killed gateway is replaced; any other file is not.
func ListenSocket(path string) (net.Listener, error) {
	if st, err := os.Lstat(path); err == nil {
		if st.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("%s exists and is not a socket", path)
		}
		if c, err := net.Dial("unix", path); err == nil {
			c.Close()
			return nil, fmt.Errorf("%s is in use by another process", path)
		}
		os.Remove(path)
	}
	// The umask makes the file 0600 from the start: no window in which
	// another user could connect.
	old := syscall.Umask(0o177)
	ln, err := net.Listen("unix", path)
	syscall.Umask(old)
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, err
	}
	return &peerCheckListener{Listener: ln, uid: uint32(os.Geteuid())}, nil
}

// peerCheckListener closes connections whose peer runs as another uid
// (SO_PEERCRED), before any byte of them is read.
type peerCheckListener struct {
	net.Listener
	uid uint32
}

func (l *peerCheckListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		uid, err := peerUID(c)
		if err == nil && uid == l.uid {
			return c, nil
		}
		c.Close()
	}
}

func peerUID(c net.Conn) (uint32, error) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return 0, errors.New("not a unix connection")
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return 0, err
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return 0, err
	}
	if credErr != nil {
		return 0, credErr
	}
	return cred.Uid, nil
}

// SocketHandler serves the API over the admin socket: every request acts as
// the built-in admin, since only the gateway's own uid can connect.
func (s *Server) SocketHandler() http.Handler {
	h := s.Handler()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), socketKey{}, true)))
	})
}
