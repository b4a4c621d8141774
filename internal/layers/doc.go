// Package layers holds the test that keeps baton's packages in their layers
// (docs/DESIGN.md, "Packages"): a package imports only packages of its own layer or
// lower ones. It has no code of its own.
package layers
