//go:build !unix

package agent

import "os/exec"

func setProcessGroup(cmd *exec.Cmd) {}

// killGroup kills the command's process (no process groups here).
func killGroup(cmd *exec.Cmd) {
	if cmd.Process != nil {
		_ = cmd.Process.Kill()
	}
}
