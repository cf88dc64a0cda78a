package distributed

// Binary forms of the ownership proofs. Hosts put these bytes inside their
// own authenticated tokens (the node MACs them with the cluster epoch and the
// tenant); the core only guarantees that decoding is strict, deterministic and
// panic-free. A decoded proof is still checked field by field against the
// current record by every command, so decoding grants nothing by itself.

const (
	leaseMagic     = "TVL"
	fenceMagic     = "TVF"
	receiptMagic   = "TVR"
	ownershipMagic = "TVO"
	proofVersion   = 1
)

func (l TaskLease) encode(e *encoder) {
	e.str(l.taskID)
	e.str(l.workerID)
	e.uvarint(l.workerGeneration)
	e.uvarint(l.taskGeneration)
	e.uvarint(uint64(l.attempt))
	e.uvarint(l.leaseID)
	e.uvarint(l.acquiredAt)
	e.uvarint(l.expiresAt)
}

func decodeLease(d *decoder) TaskLease {
	return TaskLease{
		taskID:           d.id(),
		workerID:         d.id(),
		workerGeneration: d.uvarint(),
		taskGeneration:   d.uvarint(),
		attempt:          d.u32(),
		leaseID:          d.uvarint(),
		acquiredAt:       d.uvarint(),
		expiresAt:        d.uvarint(),
	}
}

func (f QueuedTaskFence) encode(e *encoder) {
	e.str(f.taskID)
	e.uvarint(f.taskGeneration)
	e.uvarint(f.recordVersion)
}

func decodeFence(d *decoder) QueuedTaskFence {
	return QueuedTaskFence{
		taskID:         d.id(),
		taskGeneration: d.uvarint(),
		recordVersion:  d.uvarint(),
	}
}

func (r CompletionReceipt) encode(e *encoder) {
	e.str(r.taskID)
	e.uvarint(r.taskGeneration)
	e.uvarint(uint64(r.attempt))
	e.uvarint(r.leaseID)
	e.str(r.workerID)
	e.uvarint(r.workerGeneration)
	e.uvarint(r.recordVersion)
}

func decodeReceipt(d *decoder) CompletionReceipt {
	return CompletionReceipt{
		taskID:           d.id(),
		taskGeneration:   d.uvarint(),
		attempt:          d.u32(),
		leaseID:          d.uvarint(),
		workerID:         d.id(),
		workerGeneration: d.uvarint(),
		recordVersion:    d.uvarint(),
	}
}

func (o TaskOwnership) encode(e *encoder) {
	e.boolean(o.isLease)
	if o.isLease {
		o.lease.encode(e)
	} else {
		o.fence.encode(e)
	}
}

func decodeOwnership(d *decoder) TaskOwnership {
	if d.boolean() {
		return OwnershipFromLease(decodeLease(d))
	}
	return OwnershipFromFence(decodeFence(d))
}

func invalidProof(what string) *Error {
	return &Error{Kind: KindInvalidState, Reason: what + " encoding is invalid"}
}

// MarshalBinary encodes the lease deterministically. It never fails.
func (l TaskLease) MarshalBinary() ([]byte, error) {
	e := newEncoder(leaseMagic, proofVersion)
	l.encode(e)
	return e.finish(), nil
}

// UnmarshalBinary decodes bytes produced by MarshalBinary. Malformed input
// returns ErrInvalidState and leaves l unchanged.
func (l *TaskLease) UnmarshalBinary(data []byte) error {
	d, ok := newDecoder(data, leaseMagic, proofVersion)
	if !ok {
		return invalidProof("lease")
	}
	v := decodeLease(d)
	if !d.done() {
		return invalidProof("lease")
	}
	*l = v
	return nil
}

// MarshalBinary encodes the fence deterministically. It never fails.
func (f QueuedTaskFence) MarshalBinary() ([]byte, error) {
	e := newEncoder(fenceMagic, proofVersion)
	f.encode(e)
	return e.finish(), nil
}

// UnmarshalBinary decodes bytes produced by MarshalBinary. Malformed input
// returns ErrInvalidState and leaves f unchanged.
func (f *QueuedTaskFence) UnmarshalBinary(data []byte) error {
	d, ok := newDecoder(data, fenceMagic, proofVersion)
	if !ok {
		return invalidProof("fence")
	}
	v := decodeFence(d)
	if !d.done() {
		return invalidProof("fence")
	}
	*f = v
	return nil
}

// MarshalBinary encodes the receipt deterministically. It never fails.
func (r CompletionReceipt) MarshalBinary() ([]byte, error) {
	e := newEncoder(receiptMagic, proofVersion)
	r.encode(e)
	return e.finish(), nil
}

// UnmarshalBinary decodes bytes produced by MarshalBinary. Malformed input
// returns ErrInvalidState and leaves r unchanged.
func (r *CompletionReceipt) UnmarshalBinary(data []byte) error {
	d, ok := newDecoder(data, receiptMagic, proofVersion)
	if !ok {
		return invalidProof("receipt")
	}
	v := decodeReceipt(d)
	if !d.done() {
		return invalidProof("receipt")
	}
	*r = v
	return nil
}

// MarshalBinary encodes the ownership (fence or lease) deterministically.
func (o TaskOwnership) MarshalBinary() ([]byte, error) {
	e := newEncoder(ownershipMagic, proofVersion)
	o.encode(e)
	return e.finish(), nil
}

// UnmarshalBinary decodes bytes produced by MarshalBinary. Malformed input
// returns ErrInvalidState and leaves o unchanged.
func (o *TaskOwnership) UnmarshalBinary(data []byte) error {
	d, ok := newDecoder(data, ownershipMagic, proofVersion)
	if !ok {
		return invalidProof("ownership")
	}
	v := decodeOwnership(d)
	if !d.done() {
		return invalidProof("ownership")
	}
	*o = v
	return nil
}
