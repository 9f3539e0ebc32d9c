//go:build !unix

package sqlledger

import "os"

// tryLock cannot lock a file on this platform: processes migrating one
// SQLite file at once are not serialised (see migratelock_unix.go).
func tryLock(*os.File) (bool, error) { return true, nil }

func unlockFile(*os.File) error { return nil }
