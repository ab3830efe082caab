package configs

import "github.com/edgeheal/edgeheal/regfile"

// LoadLastGood reads a copy of a merged config that the agent kept (see
// agent.KeepLastGood). Its values come from one file, so origins point
// there. Like every config file, it must be a regular file of at most
// regfile.ConfigLimit.
func LoadLastGood(path string) (*Config, error) {
	data, err := regfile.Read(path, regfile.ConfigLimit)
	if err != nil {
		return nil, err
	}
	return Parse(path, data)
}
