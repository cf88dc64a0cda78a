package raftfsm

import "errors"

// Fatal returns the *EntryError of the first corrupt committed entry, or
// nil. Once set it never clears: the FSM's state stops at the entry before
// it, so the node must stop serving and be repaired (docs/node.md, "Log
// integrity").
func (f *FSM) Fatal() error {
	if e := f.fatal.Load(); e != nil {
		return e
	}
	return nil
}

// setFatal records err (an *EntryError) as the FSM's fatal error unless
// one is recorded already, calls FatalFunc the first time, and returns the
// recorded error.
func (f *FSM) setFatal(err error) error {
	var ee *EntryError
	if !errors.As(err, &ee) {
		// Invariant: only DecodeEntry's errors make the FSM fatal.
		panic("raftfsm: setFatal needs an *EntryError")
	}
	if f.fatal.CompareAndSwap(nil, ee) {
		msg := "corrupt committed log entry; applying stops"
		if ee.Unsupported {
			// NB: an intact entry of a newer release: not damage.
			msg = "committed log entry needs a newer binary; applying stops"
		}
		f.log.Error(msg, "index", ee.Index, "reason", ee.Reason)
		if f.opts.FatalFunc != nil {
			f.opts.FatalFunc(ee)
		}
	}
	return f.Fatal()
}
