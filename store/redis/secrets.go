package redis

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// Secrets reports whether Redis holds live entries under the store's
// secret, and the fingerprint of one other secret with live entries, or ""
// (store.Secrets). It sweeps, which recounts the secret's own live entries.
// Only when there are none does it scan every master for the tag sets of
// other secrets, and look for a live expiry in their indexes. It is for
// tools, not for a request's path: the scan visits every key of the server.
func (b *Backend) Secrets(ctx context.Context) (own bool, other string, err error) {
	if _, err := b.Sweep(ctx); err != nil {
		return false, "", fmt.Errorf("redis: counting the secret's live entries: %w", err)
	}
	if b.Live() > 0 {
		return true, "", nil
	}
	var mu sync.Mutex
	var fps []string
	each := func(ctx context.Context, c *goredis.Client) error {
		iter := c.Scan(ctx, 0, "gatecount:{*}:tags", 1000).Iterator()
		for iter.Next(ctx) {
			fp, pre := strings.CutPrefix(iter.Val(), "gatecount:{")
			fp, suf := strings.CutSuffix(fp, "}:tags")
			if pre && suf && len(fp) == 16 && fp != b.fp {
				mu.Lock()
				fps = append(fps, fp)
				mu.Unlock()
			}
		}
		return iter.Err()
	}
	switch c := b.c.(type) {
	case *goredis.ClusterClient:
		err = c.ForEachMaster(ctx, each)
	case *goredis.Client:
		err = each(ctx, c)
	}
	if err != nil {
		return false, "", fmt.Errorf("redis: scanning for other secrets: %w", err)
	}
	now := "(" + strconv.FormatInt(time.Now().UnixMilli(), 10)
	for _, fp := range fps {
		tags, err := b.c.SMembers(ctx, "gatecount:{"+fp+"}:tags").Result()
		if err != nil {
			return false, "", fmt.Errorf("redis: reading another secret's tags: %w", err)
		}
		for _, tag := range tags {
			idx := indexNames(keyPrefix(tag, fp))
			for _, sorted := range idx[1:] { // expiry or member -> expiry
				n, err := b.c.ZCount(ctx, sorted, now, "+inf").Result()
				if err != nil {
					return false, "", fmt.Errorf("redis: reading another secret's index: %w", err)
				}
				if n > 0 {
					return false, fp, nil
				}
			}
		}
	}
	return false, "", nil
}
