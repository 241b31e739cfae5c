package report

// Exit statuses of `leasebridge status`, `handover`, `drain` and
// `undrain` beyond ExitAdmitted (0) and ExitInvalid (2).
const (
	// ExitNotOwned: status found a session nobody owns; handover was
	// refused or the row did not change hands within the budget.
	ExitNotOwned = 1
	// ExitStoreDown: the lease store could not be read or written.
	ExitStoreDown = 3
)
