/**
 * A stable hue (0-359) for a value, for placeholders; neighbouring ids get distant hues.
 * @param {unknown} value
 * @returns {number}
 */
export function hueFor(value: unknown): number;
/**
 * The first letter or digit of a text, upper-cased ("?" when none).
 * @param {string | null | undefined} text
 * @returns {string}
 */
export function initialOf(text: string | null | undefined): string;
/**
 * Show a user's avatar in `span` (class pe-avatar): the profile's image when
 * it has one, over the name's initial on a colour of the user's own (drawn by
 * CSS from data-initial, so the text of the element stays the name).
 * @param {HTMLElement} span
 * @param {UserId | null} userId
 * @param {string} name
 * @param {string | null} [url]
 */
export function setAvatar(span: HTMLElement, userId: UserId | null, name: string, url?: string | null): void;
/**
 * The name to show for a user: the profile's, else the object's user_name, else "user <id>".
 * @param {UserId | null | undefined} userId
 * @param {Profile | undefined} profile
 * @param {string | null} [fallback]
 * @returns {string}
 */
export function userName(userId: UserId | null | undefined, profile: Profile | undefined, fallback?: string | null): string;
/**
 * Stream objects rendered as cards.
 * @extends {View<Stream>}
 */
export class StreamView extends View<Stream> {
    /** @param {StreamViewOptions} [options] */
    constructor({ userHref, userCache, ...options }?: StreamViewOptions);
    userHref: ((stream: Stream) => string | null) | null;
    userCache: import("./usercache.js").UserCache | null;
    /** @private @type {(() => void) | null} */
    private _offUsers;
    /** @private */
    private _followUsers;
    /**
     * Show the current profile of user `id` on every card of theirs.
     * @param {UserId} id
     */
    refreshUser(id: UserId): void;
    /**
     * Write a stream's user (avatar and name) into its element; ask the cache when it has no fresh profile.
     * @param {HTMLElement} el
     * @param {Stream} s
     */
    fillUser(el: HTMLElement, s: Stream): void;
    /**
     * @param {Stream} stream
     * @returns {HTMLElement}
     */
    renderItem(stream: Stream): HTMLElement;
    /**
     * @param {Element} node
     * @param {Stream} stream
     * @param {Stream} old
     */
    updateItem(node: Element, stream: Stream, old: Stream): void;
    /**
     * Write a stream's fields into its card (all of them, or those that changed).
     * @param {HTMLElement} li
     * @param {Stream} s
     * @param {Stream | null} old
     */
    fill(li: HTMLElement, s: Stream, old: Stream | null): void;
    /**
     * @param {HTMLElement} box
     * @param {Stream} s
     */
    fillThumbnail(box: HTMLElement, s: Stream): void;
}
/** Live public streams, newest first. */
export class LiveStreamsView extends StreamView {
}
/** Ended public streams, newest first. */
export class RecentStreamsView extends StreamView {
}
/** One user's public streams. */
export class UserStreamsView extends StreamView {
    /** @param {StreamViewOptions & {userId: UserId}} options */
    constructor({ userId, ...options }: StreamViewOptions & {
        userId: UserId;
    });
    userId: import("./session.js").UserId;
}
/** Public streams whose title has a word (in any inflected form). */
export class WordStreamsView extends StreamView {
    /** @param {StreamViewOptions & {word: string}} options */
    constructor({ word, ...options }: StreamViewOptions & {
        word: string;
    });
    word: string;
}
export type UserId = import("./session.js").UserId;
export type UserCache = import("./usercache.js").UserCache;
export type Profile = import("./usercache.js").Profile;
/**
 * A Stream object of the default views file.
 */
export type Stream = {
    id: string | number;
    title?: string | undefined;
    user_id?: import("./session.js").UserId | null | undefined;
    user_name?: string | undefined;
    live?: boolean | undefined;
    public?: boolean | undefined;
    /**
     * UTC (ISO 8601), or seconds/ms since the epoch
     */
    created_at?: string | number | undefined;
    ended_at?: string | number | null | undefined;
    /**
     * seconds
     */
    duration?: number | null | undefined;
    viewers?: number | null | undefined;
    /**
     * an image URL
     */
    thumbnail?: string | null | undefined;
};
/**
 * The options of a StreamView: those of View, and
 */
export type StreamViewExtras = {
    /**
     * makes the user name a link
     */
    userHref?: ((stream: Stream) => string | null) | null | undefined;
    /**
     * shows users by their profiles
     */
    userCache?: import("./usercache.js").UserCache | null | undefined;
};
export type StreamViewOptions = import("./view.js").ViewOptions<Stream> & StreamViewExtras;
import { View } from "./view.js";
