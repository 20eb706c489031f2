package sandbox

// KeyIDs returns the ids of the customer keys loaded on this node (never
// the keys).
func (s *Service) KeyIDs() ([]string, error) {
	if err := s.keys(); err != nil {
		return nil, err
	}
	return s.cfg.Keys.CustomerKeyIDs(), nil
}
