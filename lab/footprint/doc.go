// Package footprint holds edgeheal's footprint benchmark (its test files
// only): the built daemon with a realistic leaf config, a second daemon
// guarding a 5,000-peer hub, and Debian's prometheus-node-exporter, all
// running at once, node_exporter in the leaf's own network namespace;
// three scrapes of each, then an idle window, then RSS (with Pss,
// anonymous and file-backed memory from smaps_rollup), peak RSS, CPU per
// minute, binary size and goroutines of each, with the ratios to
// node_exporter measured in the same run. `make footprint` runs it (root);
// docs/performance.md, "Footprint", shows and explains the results.
package footprint
