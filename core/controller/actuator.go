package controller

// DryRun is the journal-only actuator: it changes nothing in the world.
// The decision that made the move is already in the journal; DryRun
// completes the move at once in the controller so that its role table
// shows the roles it would have set.
type DryRun struct{ C *Controller }

// Start completes the move immediately.
func (a DryRun) Start(m Move) error {
	if a.C != nil {
		a.C.MoveDone(m.EngineID, m.AtNs, nil)
	}
	return nil
}
