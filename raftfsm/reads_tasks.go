package raftfsm

import distributed "github.com/termivar/distributed"

// Tasks returns copies of every task record of the tenant, sorted by task
// ID, taken under one lock of the core (WorkerPool.Tasks). It is O(n) in
// the tenant's records: for scrape-time readers (internal/metrics), not
// for request paths.
func (v TenantView) Tasks() []distributed.ScanTask { return v.t.pool.Tasks() }
