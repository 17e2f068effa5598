package redis_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/gatecount/gatecount/store"
	"github.com/gatecount/gatecount/store/redis"
)

// A store opened from RATE_LIMIT_STORE_URL counts sign-in attempts for
// every instance of an app: two attempts a minute per account here.
func ExampleOpenURL() {
	ctx := context.Background()
	// The secret is the app's own, the same on every instance; a random one
	// keeps this example's keys apart from any earlier run's.
	secret := make([]byte, 32)
	rand.Read(secret)
	s, err := redis.OpenURL(ctx, "redis://127.0.0.1:6379/0", redis.Options{Secret: secret})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()
	signIn, err := s.Handle("signin:")
	if err != nil {
		fmt.Println(err)
		return
	}
	caps := []store.Budget{{Limit: 2, Window: time.Minute}}
	for range 3 {
		t, err := signIn.Count(ctx, []string{"alice@example.com"}, caps, 1)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println("allowed:", t.Allowed, "count:", t.Counts[0])
	}
	// Output:
	// allowed: true count: 1
	// allowed: true count: 2
	// allowed: false count: 2
}

// A store over Redis Sentinel, or any client configured by hand, goes
// through New: give the client ContextTimeoutEnabled and MaxRetries -1.
func ExampleNew_sentinel() {
	ctx := context.Background()
	client := goredis.NewFailoverClient(&goredis.FailoverOptions{
		MasterName:            "mymaster",
		SentinelAddrs:         []string{"10.0.0.1:26379", "10.0.0.2:26379", "10.0.0.3:26379"},
		ContextTimeoutEnabled: true,
		MaxRetries:            -1,
	})
	defer client.Close()
	secret := []byte(os.Getenv("GATECOUNT_SECRET"))
	s, err := redis.New(ctx, client, redis.Options{Secret: secret})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()
}
