package seal

import "sort"

// CustomerKeyIDs returns the ids of the loaded customer keys, sorted: names
// only, for listing.
func (k *Keyring) CustomerKeyIDs() []string {
	k.s.mu.RLock()
	defer k.s.mu.RUnlock()
	ids := make([]string, 0, len(k.s.customer))
	for id := range k.s.customer {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}
