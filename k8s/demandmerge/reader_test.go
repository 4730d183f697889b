package demandmerge

import "github.com/narwhal-io/narwhal/core/controller"

// The leader's controller reads merged demand in place of a local history.
var _ controller.HistoryReader = (*KindView)(nil)
