package main

import (
	"log/slog"

	"github.com/edgeheal/edgeheal/agent"
	"github.com/edgeheal/edgeheal/configs"
)

// wiring holds the real OS adapters shared by every build of the components.
type wiring struct {
	log *slog.Logger
}

func wire(cfg *configs.Config, log *slog.Logger) (*wiring, error) {
	return &wiring{log: log}, nil
}

// build makes the components for cfg with the real adapters.
func (w *wiring) build(cfg *configs.Config) ([]agent.Component, error) {
	return nil, nil
}

func (w *wiring) close() {}
