package queue

// Args is a delivery job: the record whose stored request it delivers.
type Args struct {
	Route string `json:"route"`
	Key   string `json:"key"`
}

// Kind names delivery jobs in River's tables.
func (Args) Kind() string { return "hookstamp_delivery" }
