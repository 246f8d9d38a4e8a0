//go:build !amd64

package main

import "errors"

func compatUDP() error { return errors.New("the i386 entry point exists on amd64 only") }
