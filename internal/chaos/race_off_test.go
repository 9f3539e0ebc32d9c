//go:build !race

package chaos_test

const raceBuild = false
