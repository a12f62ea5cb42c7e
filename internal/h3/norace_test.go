//go:build !race

package h3

const raceBuild = false
