package core

import "github.com/narwhal-io/narwhal/core/controller"

// NewestDecisions returns the newest limit journal records (every
// retained one when limit <= 0), oldest first.
func (c *Core) NewestDecisions(limit int) []controller.Decision { return c.ctrl.Newest(limit) }
