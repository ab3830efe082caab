package configs

import "os"

// LoadLastGood reads a copy of a merged config that the agent kept (see
// agent.KeepLastGood). Its values come from one file, so origins point
// there.
func LoadLastGood(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(path, data)
}
