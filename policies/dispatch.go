package policies

// Dispatcher routes events to the policies that accept their kind. The
// routing table is computed once by NewDispatcher, so Dispatch costs one
// table lookup plus one call per interested policy and allocates nothing.
type Dispatcher struct {
	table    [numEventKinds][]Policy
	policies []Policy
	// Events counts dispatched events, Unrouted those no policy accepted.
	Events, Unrouted uint64
}

// NewDispatcher returns a dispatcher for ps. Policies are called in the
// order given. Accepts is asked once per kind, here.
func NewDispatcher(ps ...Policy) *Dispatcher {
	d := &Dispatcher{policies: append([]Policy(nil), ps...)}
	for k := EventKind(1); k < numEventKinds; k++ {
		for _, p := range ps {
			if p.Accepts(k) {
				d.table[k] = append(d.table[k], p)
			}
		}
	}
	return d
}

// Policies returns the policies of d in dispatch order.
func (d *Dispatcher) Policies() []Policy { return d.policies }

// Dispatch hands ev to every policy that accepts ev.Kind. Events of an
// unknown kind are counted as unrouted and dropped.
func (d *Dispatcher) Dispatch(ev *Event, emit Emit) {
	d.Events++
	k := ev.Kind
	if k == 0 || k >= numEventKinds {
		d.Unrouted++
		return
	}
	ps := d.table[k]
	if len(ps) == 0 {
		d.Unrouted++
		return
	}
	for _, p := range ps {
		p.Handle(ev, emit)
	}
}

// String returns the name of an event kind.
func (k EventKind) String() string {
	switch k {
	case EventFileAccess:
		return "file_access"
	case EventTreeChildEnter:
		return "tree_child_enter"
	case EventTensorLayout:
		return "tensor_layout"
	case EventLayerStart:
		return "layer_start"
	case EventProcessExec:
		return "process_exec"
	}
	return "unknown"
}
