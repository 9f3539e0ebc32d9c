package inbox_test

import (
	"context"
	"fmt"
	"testing"

	"gorm.io/gorm"

	"github.com/hookstamp/hookstamp/inbox"
)

// BenchmarkOnce is the cost of one event applied through Once, business
// write included, on each database: what the inbox adds to a handler.
func BenchmarkOnce(b *testing.B) {
	for _, be := range backends {
		b.Run(be.name, func(b *testing.B) {
			db := be.open(b)
			ib := newInbox(b, db, inbox.Options{})
			ctx := context.Background()
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				key := fmt.Sprint("evt_bench_", i)
				if _, err := ib.Once(ctx, key, func(tx *gorm.DB) error { return book(tx, key) }); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
