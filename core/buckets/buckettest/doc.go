// Package buckettest holds plain, obviously-correct reference models of the
// buckets structures (a mutex and maps, full epochs, no tags, no stripes),
// used by the property tests and the fuzz targets to check the real
// structures' answers. It follows the documented rules of package buckets
// independently of its implementation; it shares only the exported
// placement rule (buckets.ProbeStart, buckets.ProbeWindow).
package buckettest
