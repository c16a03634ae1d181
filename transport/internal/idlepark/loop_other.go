//go:build !linux

package idlepark

import "errors"

// Supported: this platform does not park sockets (Park reports false).
const Supported = false

type loop struct{}

func startLoop(*Poller) (*loop, error) { return nil, errors.New("idlepark: no epoll on this platform") }

func (*loop) arm(int32, uint32) error { return errors.New("idlepark: no epoll on this platform") }

func (*loop) stop() {}
